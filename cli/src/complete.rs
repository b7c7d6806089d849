//! `kubectl pf <TAB>`: kubectl (1.26+) completes a plugin's arguments by running
//! `kubectl_complete-pf __complete ARGS... PARTIAL` and reading cobra's answer — one candidate
//! a line, then `:DIRECTIVE`. `kubectl-pf __complete` answers it: verbs, flags, shells, flow
//! names from the cluster, and a flow's step names for `logs`.

use clap::CommandFactory;
use kube::api::{Api, ListParams};

use crate::cluster::{self, flows};
use crate::{Cli, Global};

/// cobra's ShellCompDirectiveNoFileComp.
const NO_FILES: u8 = 4;
/// cobra's ShellCompDirectiveDefault (files allowed).
const FILES: u8 = 0;

/// Answers `__complete ARGS... PARTIAL`; returns the lines to print.
pub async fn complete(args: &[String]) -> Vec<String> {
    let (partial, words) = match args.split_last() {
        Some((p, w)) => (p.as_str(), w),
        None => ("", &[][..]),
    };
    let cmd = Cli::command();
    let mut g = Global {
        namespace: None,
        context: None,
        kubeconfig: None,
    };
    let mut positional: Vec<&str> = Vec::new();
    let mut prev_flag: Option<&str> = None;
    for w in words {
        if let Some(flag) = prev_flag.take() {
            match flag {
                "-n" | "--namespace" => g.namespace = Some(w.clone()),
                "--context" => g.context = Some(w.clone()),
                "--kubeconfig" => g.kubeconfig = Some(w.into()),
                _ => {}
            }
            continue;
        }
        if w.starts_with('-') {
            if !w.contains('=') && takes_value(w) {
                prev_flag = Some(w.as_str());
            }
            continue;
        }
        positional.push(w);
    }
    let mut out: Vec<String> = Vec::new();
    let mut directive = NO_FILES;
    match prev_flag {
        Some("-n" | "--namespace") => out = namespaces(&g).await,
        Some("-f" | "--filename" | "--kubeconfig") => directive = FILES,
        Some("-o" | "--output") => out = vec!["yaml".into(), "json".into()],
        Some(_) => {}
        None if partial.starts_with('-') => {
            let mut sub = positional.first().and_then(|v| cmd.find_subcommand(v));
            // `rollout status --<TAB>`: the nested verb's flags.
            if let Some(nested) = sub.and_then(|s| s.find_subcommand(positional.get(1)?)) {
                sub = Some(nested);
            }
            let flags = sub
                .unwrap_or(&cmd)
                .get_arguments()
                .chain(cmd.get_arguments());
            for a in flags {
                if let Some(l) = a.get_long() {
                    out.push(format!("--{l}"));
                }
            }
        }
        None => match positional.as_slice() {
            [] => {
                out = cmd
                    .get_subcommands()
                    .map(|s| s.get_name().to_string())
                    .filter(|n| n != "help")
                    .collect()
            }
            ["completion"] => out = ["bash", "zsh", "fish"].map(String::from).to_vec(),
            ["get" | "logs" | "plan" | "retry" | "run" | "stop" | "suspend" | "resume"
            | "approve" | "reject"] => out = flow_names(&g).await,
            ["rollout"] => out = ROLLOUT_VERBS.map(String::from).to_vec(),
            ["rollout", _] => out = flow_names(&g).await,
            ["logs", flow] => out = step_names(&g, flow).await,
            _ => {}
        },
    }
    out.sort();
    out.dedup();
    let mut lines: Vec<String> = out.into_iter().filter(|c| c.starts_with(partial)).collect();
    lines.push(format!(":{directive}"));
    lines
}

/// `kubectl pf rollout`'s own verbs.
const ROLLOUT_VERBS: [&str; 5] = ["status", "pause", "resume", "promote", "undo"];

fn takes_value(flag: &str) -> bool {
    matches!(
        flag,
        "-n" | "--namespace"
            | "--context"
            | "--kubeconfig"
            | "-o"
            | "--output"
            | "-f"
            | "--filename"
            | "--timeout"
    )
}

async fn namespaces(g: &Global) -> Vec<String> {
    let Ok(k) = cluster::connect(g, None).await else {
        return Vec::new();
    };
    let api = Api::<k8s_openapi::api::core::v1::Namespace>::all(k.client);
    cluster::names(&api, &ListParams::default()).await
}

async fn flow_names(g: &Global) -> Vec<String> {
    let Ok(k) = cluster::connect(g, None).await else {
        return Vec::new();
    };
    let api = flows(&k.client, Some(&k.namespace));
    cluster::names(&api, &ListParams::default()).await
}

async fn step_names(g: &Global, flow: &str) -> Vec<String> {
    let Ok(k) = cluster::connect(g, None).await else {
        return Vec::new();
    };
    let Ok(f) = cluster::flow(&k, flow).await else {
        return Vec::new();
    };
    cluster::status(&f)
        .steps
        .into_iter()
        .map(|s| s.name.unwrap_or(s.id))
        .collect()
}
