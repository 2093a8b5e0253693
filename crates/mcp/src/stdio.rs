//! `haggle mcp`: the MCP server on standard input and output, for hosts that launch local tools
//! (desktop assistants). It acts as one agent, whose API key it is started with, on the Haggle
//! server at `--url`. Logs go to standard error; standard output carries only the protocol.

use anyhow::{Context, bail};
use haggle_client::Client;
use rmcp::ServiceExt;

use crate::Haggle;

#[derive(clap::Args)]
pub struct McpArgs {
    /// The Haggle server to negotiate on.
    #[arg(long, env = "HAGGLE_URL", default_value = haggle_client::DEFAULT_URL)]
    pub url: String,
    /// The API key of the agent every tool acts as.
    #[arg(long, env = "HAGGLE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

impl std::fmt::Debug for McpArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpArgs")
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Serves MCP on stdio until the host closes it.
pub async fn run(args: McpArgs) -> anyhow::Result<()> {
    let Some(api_key) = args.api_key.filter(|key| !key.trim().is_empty()) else {
        bail!("haggle mcp acts as one agent: give its API key with --api-key or HAGGLE_API_KEY");
    };
    let client = Client::new(&args.url, Some(api_key))?;
    // The first call checks the server and the key, so that a host's log says what is wrong.
    let me = client.me().await.map_err(|error| error.first_contact(&args.url, "--url / HAGGLE_URL"))?;
    tracing::info!(agent = %me.id, name = %me.name, url = %args.url, "serving MCP on stdio");
    let service = Haggle::for_agent(client, me.id)
        .serve(rmcp::transport::stdio())
        .await
        .context("the MCP client did not start the session")?;
    service.waiting().await.context("the MCP session failed")?;
    Ok(())
}
