//! `kubectl-pf`: the kubectl plugin for PseudoFlows. `kubectl pf
//! list|get|logs|plan|retry|run|stop|suspend|resume|approve|reject|rollout` once it is on `PATH` (docs/cli.md).
//!
//! Exit codes follow kubectl: 0 success, 1 an error. `plan` follows `flux diff`: 0 no change,
//! 1 changes, 2 an error.

#[macro_use]
mod out;

mod approve;
mod bound;
mod cluster;
mod complete;
mod escape;
mod get;
mod in_object;
mod logs;
mod placement;
mod plan;
mod retry;
mod revision;
mod rollout;
mod runs;
mod show;
mod suspend;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

/// What every verb shares: where the cluster is, as kubectl takes it.
#[derive(Debug, Clone, clap::Args)]
pub struct Global {
    /// The namespace (default: the kubeconfig context's, else `default`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<std::path::PathBuf>,
}

/// How a verb that returns objects prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// The objects as YAML.
    Yaml,
    /// The objects as JSON.
    Json,
}

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-pf",
    bin_name = "kubectl pf",
    version,
    about = "Inspect, preview and control PseudoFlows (kubectl plugin)"
)]
pub struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Debug, Subcommand)]
enum Verb {
    /// List flows with their phase and last run.
    List {
        /// Flows of every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Print the flows as yaml or json instead of a table.
        #[arg(short = 'o', long)]
        output: Option<Output>,
    },
    /// Show a flow's current run as a tree: steps, node instances, loop iterations.
    Get {
        /// The flow's name.
        name: String,
        /// Redraw on every change of the flow or its Jobs (Ctrl-C to stop).
        #[arg(short = 'w', long)]
        watch: bool,
        /// Print the flow as yaml or json instead of the tree.
        #[arg(short = 'o', long)]
        output: Option<Output>,
    },
    /// Print the output of one step, or of every step in order, prefixed per node instance.
    Logs {
        /// The flow's name.
        name: String,
        /// A step: its name, its node id (`s3-s0`) or its path (`spec.steps[3].steps[0]`).
        step: Option<String>,
        /// Keep printing new lines until the run ends.
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Preview what a run would change, by server-side dry-run under the flow's ServiceAccount.
    ///
    /// Exit codes as `flux diff`: 0 no change, 1 changes, 2 an error.
    Plan {
        /// An applied flow's name.
        #[arg(conflicts_with = "filename", required_unless_present = "filename")]
        name: Option<String>,
        /// A file with a flow not yet applied (`-` for stdin).
        #[arg(short = 'f', long = "filename")]
        filename: Option<std::path::PathBuf>,
    },
    /// Retry the last run: a new run that keeps the steps that succeeded (their outputs
    /// restored) and restarts at the failed step, or at STEP.
    Retry {
        /// The flow's name.
        name: String,
        /// Restart at this step (name or path) and run it and every step after it again.
        #[arg(long)]
        from: Option<String>,
    },
    /// Start a run now (a fresh `ops.example.com/run` value), also of a scheduled flow, as
    /// `kubectl create job --from` does for a CronJob.
    Run {
        /// The flow's name.
        name: String,
    },
    /// End a running run now: its running Jobs deleted, no further step started (no onError),
    /// the run Aborted (`ops.example.com/stop` set to the run's id).
    Stop {
        /// The flow's name.
        name: String,
        /// The run to stop (default: the current run, which must be running).
        #[arg(long)]
        run: Option<String>,
    },
    /// Set `spec.suspend`: no new run starts, and a running run holds (its running steps finish).
    Suspend {
        /// The flow's name.
        name: String,
    },
    /// Clear `spec.suspend`: a held run goes on where it stopped, and runs start again.
    Resume {
        /// The flow's name.
        name: String,
    },
    /// Approve a waiting `approval` step in the run it waits in: sets
    /// `ops.example.com/approve=STEP` on the flow as read (needs the `approve` verb on
    /// pseudoflows; the webhook records who approved).
    Approve {
        /// The flow's name.
        name: String,
        /// The approval step's name.
        step: String,
        /// The run the decision is for: refused if the step waits in another.
        #[arg(long)]
        run: Option<String>,
    },
    /// Reject a waiting `approval` step (the run fails): sets `ops.example.com/reject=STEP`.
    Reject {
        /// The flow's name.
        name: String,
        /// The approval step's name.
        step: String,
        /// The run the decision is for: refused if the step waits in another.
        #[arg(long)]
        run: Option<String>,
    },
    /// A bound flow's rollout of its newest revision: `status` (wait until it completes),
    /// `pause`, `resume`, `promote`, `undo` (these need the `rollout` verb on pseudoflows; the
    /// webhook records who asked).
    Rollout {
        #[command(subcommand)]
        verb: rollout::RolloutVerb,
    },
    /// Print a shell completion script: `source <(kubectl pf completion bash)`.
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__complete") {
        // kubectl's plugin completion (`kubectl_complete-pf`, see docs/cli.md).
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        for line in rt.block_on(complete::complete(&args[2..])) {
            outln!("{line}");
        }
        return ExitCode::SUCCESS;
    }
    let cli = Cli::parse();
    if let Verb::Completion { shell } = cli.verb {
        let mut cmd = Cli::command();
        clap_complete::generate(shell, &mut cmd, "kubectl-pf", &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let is_plan = matches!(cli.verb, Verb::Plan { .. });
    let result = rt.block_on(run(cli));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(if is_plan { 2 } else { 1 })
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    let g = &cli.global;
    match cli.verb {
        Verb::List {
            all_namespaces,
            output,
        } => {
            let k = cluster::connect(g, None).await?;
            get::list(&k, all_namespaces, output).await?;
            Ok(0)
        }
        Verb::Get {
            name,
            watch,
            output,
        } => {
            let k = cluster::connect(g, None).await?;
            get::get(&k, &name, watch, output).await?;
            Ok(0)
        }
        Verb::Logs { name, step, follow } => {
            let k = cluster::connect(g, None).await?;
            logs::logs(&k, &name, step.as_deref(), follow).await?;
            Ok(0)
        }
        Verb::Plan { name, filename } => plan::plan(g, name.as_deref(), filename.as_deref()).await,
        Verb::Retry { name, from } => {
            let k = cluster::connect(g, None).await?;
            retry::retry(&k, &name, from.as_deref()).await?;
            Ok(0)
        }
        Verb::Run { name } => {
            let k = cluster::connect(g, None).await?;
            runs::run(&k, &name).await?;
            Ok(0)
        }
        Verb::Stop { name, run } => {
            let k = cluster::connect(g, None).await?;
            runs::stop(&k, &name, run.as_deref()).await?;
            Ok(0)
        }
        Verb::Suspend { name } => {
            let k = cluster::connect(g, None).await?;
            suspend::set(&k, &name, true).await?;
            Ok(0)
        }
        Verb::Resume { name } => {
            let k = cluster::connect(g, None).await?;
            suspend::set(&k, &name, false).await?;
            Ok(0)
        }
        Verb::Approve { name, step, run } => {
            let k = cluster::connect(g, None).await?;
            approve::decide(&k, &name, &step, true, run.as_deref()).await?;
            Ok(0)
        }
        Verb::Reject { name, step, run } => {
            let k = cluster::connect(g, None).await?;
            approve::decide(&k, &name, &step, false, run.as_deref()).await?;
            Ok(0)
        }
        Verb::Rollout { verb } => {
            let k = cluster::connect(g, None).await?;
            rollout::rollout(&k, verb).await?;
            Ok(0)
        }
        Verb::Completion { .. } => unreachable!("handled before the runtime starts"),
    }
}

/// Prints `v` as YAML or JSON.
pub fn print_objects(v: &serde_json::Value, output: Output) -> anyhow::Result<()> {
    match output {
        Output::Json => outln!("{}", serde_json::to_string_pretty(v)?),
        Output::Yaml => out!("{}", serde_yaml::to_string(v)?),
    }
    Ok(())
}
