# Single entry point. `make test` is the README's test command; `make demo` the run command.
SHELL := /bin/bash
CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/pseudoflow
export CARGO_TARGET_DIR ?= $(CACHE_DIR)/target

.PHONY: test lint unit k8s argocd tools images real-node-setup cluster crd docs bench chart-test demo demo-real soak

## test: everything CI runs — lint, the CRD freshness check, unit, snapshot and e2e tests (the
## real-node suite included: it needs the images; the Argo CD suite needs `make argocd`).
test: lint k8s argocd tools images
	cargo test --workspace --locked --no-fail-fast
	bash charts/test.sh

lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets --locked -- -D warnings

## unit: tests that need no cluster (unit tests, compiler snapshots and CLI tests).
unit:
	cargo test --workspace --locked --lib --bins
	cargo test --locked -p pseudoflow-compiler

## real-node-setup: containerd, runc, CNI plugins, iptables, mmdebstrap, musl-tools from Debian
## (only what is missing; testenv's real nodes and `make images` need them).
real-node-setup:
	bash testenv/real-node/install.sh

## images: the runtime image and the real nodes' pause image as OCI archives under
## ~/.cache/pseudoflow/images, built from Debian packages and this repository (no registry, no
## container engine); prints their sizes. See runtime-image/local/build.sh.
images: k8s real-node-setup
	bash runtime-image/local/build.sh

## tools: helm (from its Go module), promtool and lua for the chart checks.
tools:
	bash charts/install-tools.sh

## demo: a local cluster, the controller as installed (webhooks, approval key, impersonation), the
## seed's example flows running to Succeeded, a flow bound to seed 001's Database kind and an
## approval waiting; kubectl-pf built beside it for the printed commands. ARGOCD=1: the seed flows
## synced by a real Argo CD from a local git repository (built first by `make argocd` if missing);
## it prints how to commit a change and watch it run.
demo: k8s $(if $(ARGOCD),argocd)
	cargo build --locked -q -p pseudoflow-runtime --bin pseudoflow-step
	cargo build --locked -q -p pseudoflow-cli --bin kubectl-pf
	cargo run --locked -q -p pseudoflow-demo $(if $(ARGOCD),-- --argocd)

## demo-real: `make demo` on a cluster whose nodes are all real (cp-0, node-1: kubelet,
## containerd, runc, CNI, kube-proxy), the controller installed by `helm install` of the chart as a
## Deployment pod from the local image (leader election on, its webhooks called by the API server
## through their Service over the pod network): the seed flows, the bound Database, the approval
## waiting and the same tour; Ctrl-C stops everything and removes what the nodes made on the
## machine. REAL=n for more nodes.
demo-real: k8s images tools
	cargo build --locked -q -p pseudoflow-cli --bin kubectl-pf
	cargo run --locked -q -p pseudoflow-demo -- --real $${REAL:-2}

## k8s: build (or reuse from the cache) etcd and the Kubernetes control plane from upstream Go modules.
k8s:
	bash testenv/build-k8s.sh

## argocd: build (or reuse from the cache) Argo CD v3.6.1 from its Go module, and redis-server
## from Debian if missing (testenv/build-argocd.sh; first time about 14 min on 2 cores, an estimate: docs/gitops.md).
argocd:
	bash testenv/build-argocd.sh

## cluster: a local control plane with simulated nodes, for a person; Ctrl-C stops it.
## ARGS='--real 2' adds real nodes (make images first), ARGS='--nodes 0 --real 2' only real ones.
cluster: k8s
	cargo run --locked -p pseudoflow-testenv --bin pseudoflow-cluster -- $(ARGS)

## crd: regenerate crd/pseudoflow.yaml (and the chart's copy) from the Rust types.
crd:
	cargo run --locked -q -p pseudoflow-crd --bin pseudoflow-crdgen > crd/pseudoflow.yaml
	cargo run --locked -q -p pseudoflow-crd --bin pseudoflow-crdgen chart > charts/pseudoflow-operator/templates/crd-pseudoflow.yaml

## docs: regenerate docs/steps.md from the step types.
docs:
	cargo run --locked -q -p pseudoflow-crd --bin pseudoflow-crdgen docs > docs/steps.md

## chart-test: helm lint/template, promtool tests of the alerts, the Argo CD health check in Lua.
chart-test:
	bash charts/test.sh

## bench: the compiler benchmark (10,000-step flow against the YAML-parse baseline), the
## orchestration gap (50-step flow on testenv against a kubectl apply+wait loop), then the
## comparison with the alternatives on one testenv, printed as one markdown table: 50 ConfigMaps by PseudoFlow vs
## ansible-playbook (pinned, into its own venv by bench/setup-ansible.sh) vs a kubectl loop; the
## seed NodeLocal DNS flow; a 100-node fan-out vs kubectl under xargs -P; 1,000 flows at once
## (PSEUDOFLOW_BENCH_SCALE_FLOWS), the controller's peak RSS; a bound flow vs a kopf operator (pinned,
## into its own venv by bench/setup-kopf.sh); seed 001's Database flow as shipped vs the seed's own
## kopf code (100 Databases created, then deleted). See controller/benches/compare/.
bench: k8s images
	bash bench/setup-ansible.sh
	bash bench/setup-kopf.sh
	cargo bench --locked -p pseudoflow-compiler
	cargo build --release --locked -q -p pseudoflow-runtime --bin pseudoflow-step
	cargo build --release --locked -q -p pseudoflow-controller --bin pseudoflow-controller
	cargo bench --locked -p pseudoflow-controller --bench orchestration
	cargo bench --locked -p pseudoflow-controller --bench compare

## soak: the chaos suite's controller-kill test at length: 500 SIGKILLs at random points
## (CHAOS_KILLS=n to change; the seed is printed, CHAOS_SEED=n replays a schedule).
soak: k8s
	cargo build --locked -q -p pseudoflow-runtime --bin pseudoflow-step
	CHAOS_KILLS=$${CHAOS_KILLS:-500} cargo test --locked -p pseudoflow-controller --test chaos -- --nocapture controller_sigkilled_at_random_points
