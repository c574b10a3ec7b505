//! `kubectl-loadstar`: which nodes are hot, why a pod went where it went, and where a pod
//! would go now — over the scorer's gRPC API. kubectl runs it as `kubectl loadstar …` when
//! it is on PATH.
mod connect;
mod pod;
mod table;
mod view;

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use loadstar_proto::pb;

use connect::{Client, ConnectArgs};
use view::SortBy;

/// Loadstar from the command line: real node load, scheduling decisions explained.
#[derive(Debug, Parser)]
#[command(name = "kubectl-loadstar", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Output format.
    #[arg(short, long, global = true, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Colour the table: auto (a terminal, and NO_COLOR unset), always or never.
    #[arg(long, global = true, value_enum, default_value_t = ColourMode::Auto)]
    color: ColourMode,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Aligned columns.
    Table,
    /// JSON (one document per refresh with --watch).
    Json,
    /// YAML (documents separated by `---` with --watch).
    Yaml,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ColourMode {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Nodes by real load: the latest sample, the 60/300/900 s means and p95, like
    /// `kubectl top nodes` with history.
    Top {
        /// Order of the rows.
        #[arg(long, value_enum, default_value_t = SortBy::Cpu)]
        sort: SortBy,
        /// Window whose mean orders the rows, seconds.
        #[arg(long, default_value_t = 60)]
        window: u32,
        /// Show at most this many nodes (0: all).
        #[arg(long, default_value_t = 0)]
        limit: usize,
        /// Only nodes whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        /// Refresh until interrupted.
        #[arg(short, long)]
        watch: bool,
        /// Seconds between refreshes with --watch.
        #[arg(long, default_value_t = 2.0)]
        interval: f64,
    },
    /// Where a pod went and why: every node's filter result and the best nodes' per-plugin
    /// scores, from the decision record the scheduler keeps.
    Explain {
        /// `namespace/name`, or `name` with --namespace.
        pod: String,
        /// Namespace of a bare pod name.
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
    /// What would happen to a pod now: feasible nodes ranked with per-plugin scores, and
    /// every rejection. Nothing is bound.
    Score {
        /// Manifest (YAML or JSON; `-` reads stdin): a Pod, or a workload's pod template.
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
        /// Namespace when the manifest names none.
        #[arg(short, long)]
        namespace: Option<String>,
        /// Profile (default: the scorer's default profile).
        #[arg(long, default_value = "")]
        profile: String,
        /// Ranked nodes to show (0: all).
        #[arg(long, default_value_t = 10)]
        limit: u32,
        /// When nothing fits, also show what preemption would evict.
        #[arg(long)]
        preempt: bool,
    },
    /// The scorer's profiles: score plugins with weights, window, stale policy.
    Profiles,
}

fn colour(mode: ColourMode) -> bool {
    match mode {
        ColourMode::Always => true,
        ColourMode::Never => false,
        ColourMode::Auto => {
            std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
        }
    }
}

/// A call's failure in words, with a hint where one helps.
fn status(what: &str, s: tonic::Status) -> anyhow::Error {
    let hint = match s.code() {
        tonic::Code::Unauthenticated => {
            " (this scorer checks callers: pass --token-file, or a client certificate)"
        }
        tonic::Code::PermissionDenied => " (the caller's RBAC does not allow it)",
        tonic::Code::Unimplemented if s.message().is_empty() => {
            " (the scorer is older than this CLI)"
        }
        _ => "",
    };
    anyhow::anyhow!("{what}: {}{hint}", s.message())
}

fn print_value(output: Output, value: &impl serde::Serialize, watch: bool) -> Result<()> {
    match output {
        Output::Json => {
            if watch {
                println!("{}", serde_json::to_string(value)?);
            } else {
                println!("{}", serde_json::to_string_pretty(value)?);
            }
        }
        Output::Yaml => {
            if watch {
                println!("---");
            }
            print!("{}", serde_norway::to_string(value)?);
        }
        // Each command renders its own table; reaching here is a programming error.
        Output::Table => bail!("internal error: table output has no generic renderer"),
    }
    Ok(())
}

async fn all_nodes(client: &mut Client) -> Result<Vec<pb::NodeStatus>> {
    let mut out = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_nodes(pb::ListNodesRequest {
                page_size: 5000,
                page_token,
            })
            .await
            .map_err(|s| status("listing nodes", s))?
            .into_inner();
        out.extend(page.nodes);
        if page.next_page_token.is_empty() {
            return Ok(out);
        }
        page_token = page.next_page_token;
    }
}

#[allow(clippy::too_many_arguments)]
async fn top(
    mut client: Client,
    output: Output,
    colour: bool,
    sort: SortBy,
    window: u32,
    limit: usize,
    filter: Option<String>,
    watch: bool,
    interval: f64,
) -> Result<()> {
    let interval = Duration::from_secs_f64(interval.clamp(0.2, 3600.0));
    let clear = watch && output == Output::Table && std::io::stdout().is_terminal();
    loop {
        let nodes = all_nodes(&mut client).await?;
        let mut rows = view::top_rows(&nodes, sort, window);
        if let Some(f) = &filter {
            rows.retain(|r| r.node.contains(f.as_str()));
        }
        let total = rows.len();
        if limit > 0 {
            rows.truncate(limit);
        }
        match output {
            Output::Table => {
                if clear {
                    print!("\u{1b}[H\u{1b}[2J");
                }
                if rows.is_empty() {
                    println!("No nodes reported to the scorer yet.");
                } else {
                    print!("{}", view::top_table(&rows).render(colour));
                    if rows.len() < total {
                        println!("({} of {total} nodes shown)", rows.len());
                    }
                }
                if watch {
                    println!();
                }
            }
            _ => print_value(output, &rows, watch)?,
        }
        if !watch {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

async fn explain(
    mut client: Client,
    output: Output,
    colour: bool,
    pod: &str,
    namespace: &str,
) -> Result<()> {
    let (ns, name) = pod.split_once('/').unwrap_or((namespace, pod));
    if name.is_empty() || ns.is_empty() {
        bail!("give the pod as namespace/name or as name with --namespace, not {pod:?}");
    }
    let record = match client
        .explain_pod(pb::ExplainPodRequest {
            pod: Some(pb::PodReference {
                namespace: ns.into(),
                name: name.into(),
            }),
        })
        .await
    {
        Ok(r) => r.into_inner(),
        Err(s) if s.code() == tonic::Code::NotFound => {
            bail!("{}", s.message())
        }
        Err(s) => return Err(status(&format!("explaining {ns}/{name}"), s)),
    };
    let e = view::explanation(&record);
    match output {
        Output::Table => print!("{}", view::explanation_text(&e, colour)),
        _ => print_value(output, &e, false)?,
    }
    Ok(())
}

async fn score(
    mut client: Client,
    output: Output,
    colour: bool,
    request: (PathBuf, Option<String>, String, u32, bool),
) -> Result<()> {
    let (file, namespace, profile, limit, preempt) = request;
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the manifest from stdin")?
    } else {
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?
    };
    let json = pod::pod_json(&text, namespace.as_deref())
        .with_context(|| format!("reading {}", file.display()))?;
    let response = client
        .score(pb::ScoreRequest {
            pod: Some(pb::score_request::Pod::PodJson(json)),
            profile,
            limit,
            preempt,
            ..Default::default()
        })
        .await
        .map_err(|s| status("scoring", s))?
        .into_inner();
    let v = view::score_view(&response);
    match output {
        Output::Table => print!("{}", view::score_text(&v, colour)),
        _ => print_value(output, &v, false)?,
    }
    Ok(())
}

async fn profiles(mut client: Client, output: Output, colour: bool) -> Result<()> {
    let r = client
        .list_profiles(pb::ListProfilesRequest::default())
        .await
        .map_err(|s| status("listing profiles", s))?
        .into_inner();
    let v = view::profile_views(&r);
    match output {
        Output::Table => print!("{}", view::profiles_table(&v).render(colour)),
        _ => print_value(output, &v, false)?,
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, its causes after colons; no backtrace for an operator's typo.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    let colour = colour(cli.color);
    let client = connect::connect(&cli.connect).await?;
    match cli.command {
        Command::Top {
            sort,
            window,
            limit,
            filter,
            watch,
            interval,
        } => {
            top(
                client, cli.output, colour, sort, window, limit, filter, watch, interval,
            )
            .await
        }
        Command::Explain { pod, namespace } => {
            explain(client, cli.output, colour, &pod, &namespace).await
        }
        Command::Score {
            file,
            namespace,
            profile,
            limit,
            preempt,
        } => {
            score(
                client,
                cli.output,
                colour,
                (file, namespace, profile, limit, preempt),
            )
            .await
        }
        Command::Profiles => profiles(client, cli.output, colour).await,
    }
}
