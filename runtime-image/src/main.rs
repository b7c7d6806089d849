//! `pseudoflow-step run --input FILE`: the entry point of every executor Job pod. Exit code 0
//! when the step succeeded, 1 when it failed, 2 on bad input; the result always goes to the
//! termination message (or a result ConfigMap it points to).

use std::process::ExitCode;

use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::protocol::INPUT_DIGEST_ENV;
use pseudoflow_runtime::journal::Journal;
use pseudoflow_runtime::{
    check_input_digest, execute, output, parse_input, segment, ExecCtx, StepError,
};

const USAGE: &str = "usage: pseudoflow-step run --input FILE | pseudoflow-step install DEST";

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PSEUDOFLOW_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_current_span(false)
        .init();
}

fn input_path(args: &[String]) -> Result<String, String> {
    match args {
        [cmd, flag, path] if cmd == "run" && flag == "--input" => Ok(path.clone()),
        [cmd, flag] if cmd == "run" && flag.starts_with("--input=") => {
            Ok(flag["--input=".len()..].to_string())
        }
        _ => Err(USAGE.to_string()),
    }
}

/// Writes a bad-input result where a result is expected, so the controller sees why.
fn report_bad_input(message: String) -> ExitCode {
    tracing::error!(error = %message, "bad input");
    let text = serde_json::to_string(&StepResult::failed(message)).expect("serialises");
    let path = std::env::var("PSEUDOFLOW_TERMINATION_LOG")
        .unwrap_or_else(|_| output::DEFAULT_TERMINATION_LOG.into());
    let _ = std::fs::write(path, &text);
    println!("{text}");
    ExitCode::from(2)
}

/// `install DEST`: copies this (static) executable to DEST, so a step can run in another image
/// (`exec.image`): an init container of the runtime image installs it into a shared emptyDir.
fn install(dest: &str) -> ExitCode {
    use std::os::unix::fs::PermissionsExt;
    let copied = std::env::current_exe().and_then(|me| {
        if let Some(dir) = std::path::Path::new(dest).parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::copy(me, dest)?;
        std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755))
    });
    match copied {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pseudoflow-step install {dest}: {e}");
            ExitCode::from(2)
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    init_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--version") {
        println!("pseudoflow-step {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    if let [cmd, dest] = args.as_slice() {
        if cmd == "install" {
            return install(dest);
        }
    }
    let path = match input_path(&args) {
        Ok(p) => p,
        Err(usage) => return report_bad_input(usage),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => return report_bad_input(format!("cannot read {path}: {e}")),
    };
    if let Err(why) = check_input_digest(&text, std::env::var(INPUT_DIGEST_ENV).ok().as_deref()) {
        return report_bad_input(why.to_string());
    }
    let (input, step) = match parse_input(&text) {
        Ok(v) => v,
        Err(e) => return report_bad_input(e.to_string()),
    };
    tracing::info!(
        path = %input.path, node = %input.node_id, task = ?input.task,
        step_type = step.kind.type_name(), target_node = ?input.target_node,
        attempt = input.attempt, "starting"
    );
    let ctx = ExecCtx::from_env(input);
    let result = if ctx.input.segment.is_empty() {
        match execute(&ctx, &step).await {
            Ok(r) => r,
            Err(StepError::Input(m)) => return report_bad_input(m),
            Err(e) => StepResult::failed(e.to_string()),
        }
    } else {
        let mut journal = Journal::open(&ctx, &output::job_name()).await;
        segment::run(&ctx, &mut journal).await
    };
    tracing::info!(ok = result.ok, changed = result.changed, summary = %output::loggable(&result), "finished");
    if output::deliver(&ctx, &result).await {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
