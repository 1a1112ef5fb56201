//! `sessionpack`: the command-line front of the library.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = sessionpack_cli::commands::Cli::parse();
    let role = sessionpack_cli::commands::acl_role(&cli);
    match sessionpack_cli::commands::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            if let (sessionpack::Error::NoPermission(_), Some(role)) = (&e, role) {
                eprintln!(
                    "hint: `sessionpack acl --role {role}` prints the ACL rule this command needs"
                );
            }
            std::process::ExitCode::FAILURE
        }
    }
}
