//! The documentation's examples (the README's curl walkthrough, the blocks of the pages under
//! `docs/`), run verbatim against a live server.

use crate::support::{ServerProcess, TestDb};

/// A documentation file, by its path in the repository (`README.md`, `docs/API.md`).
fn doc(file: &str) -> String {
    let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {file}: {error}"))
}

/// The shell code of a block of `file` between `<!-- name -->` and `<!-- /name -->`.
fn shell_block(file: &str, name: &str) -> String {
    let text = doc(file);
    let start = text.find(&format!("<!-- {name} -->")).unwrap_or_else(|| panic!("{file} has the {name} block"));
    let end = text.find(&format!("<!-- /{name} -->")).unwrap_or_else(|| panic!("{file}'s {name} block ends"));
    let block = &text[start..end];
    let code_start = block.find("```sh\n").expect("the walkthrough is a sh code block") + "```sh\n".len();
    let code_end = block[code_start..].find("```").expect("the code block ends") + code_start;
    block[code_start..code_end].to_owned()
}

/// Runs a shell block of `file` against a fresh server; returns what it printed. The block must
/// succeed and print nothing on standard error: what a reader sees is what the file shows.
pub async fn run_block(file: &str, name: &str) -> String {
    let db = TestDb::create().await;
    let token = "walkthrough-operator-token-42";
    let server = ServerProcess::spawn(&[("DATABASE_URL", db.url.as_str()), ("HAGGLE_ADMIN_TOKEN", token)]);
    let script = shell_block(file, name);
    let output = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .env("HAGGLE_URL", &server.base)
        .env("HAGGLE_ADMIN_TOKEN", token)
        .output()
        .await
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{file}'s {name} block failed\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver:\n{}",
        server.log()
    );
    assert!(
        stderr.is_empty(),
        "{file}'s {name} block printed on standard error, which {file} does not show\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

/// Each line is printed by the block and shown in `file`.
pub fn prints(file: &str, stdout: &str, lines: &[&str]) {
    let text = doc(file);
    for line in lines {
        assert!(stdout.lines().any(|l| l == *line), "the block prints {line}:\n{stdout}");
        assert!(text.contains(line), "{file} shows {line}");
    }
}

#[tokio::test]
async fn the_readme_walkthrough_works_verbatim() {
    let stdout = run_block("README.md", "walkthrough").await;
    // What the README says the walkthrough prints.
    prints(
        "README.md",
        &stdout,
        &[
            r#"{"name":"desk-buyer","tier":"AGENCY"}"#,
            r#"{"amount":130000,"currency":"USD","status":"CONFIRMED"}"#,
            r#"{"status":"ACCEPTED","rounds":3}"#,
            r#"{"status":"COUNTERED"}"#,
            r#"["bid.placed","bid.countered","bid.countered","bid.accepted","order.created"]"#,
        ],
    );
}

#[tokio::test]
async fn the_auto_negotiation_example_works_verbatim() {
    let stdout = run_block("docs/AUTO-NEGOTIATION.md", "auto-negotiation").await;
    prints(
        "docs/AUTO-NEGOTIATION.md",
        &stdout,
        &[
            r#"{"scope":"listing","role":"seller"}"#,
            r#"{"scope":"agent","role":"buyer"}"#,
            r#"{"status":"ACCEPTED","amounts":[25000,29925,26500,28350]}"#,
            r#"{"status":"active","recommendation":"counter","counter_terms":{"proposed_price":324.9}}"#,
            r#"{"buyer_price":220,"seller_price":307.8,"action":"counter","status":"active"}"#,
            r#"{"buyer_price":307.8,"seller_price":307.8,"action":"accept","status":"accepted"}"#,
            r#"{"status":"booked","final_cpm":307800000,"is_order":true}"#,
        ],
    );
}

/// The signature check in docs/API.md, in Python, accepts what the server signs and refuses the rest.
#[tokio::test]
async fn the_documented_signature_check_works() {
    use haggle_server::webhooks::signature::sign;
    let api = doc("docs/API.md");
    let start = api.find("<!-- verify-signature -->").expect("docs/API.md shows how to verify a signature");
    let end = api.find("<!-- /verify-signature -->").expect("the block ends");
    let block = &api[start..end];
    let code_start = block.find("```python\n").expect("a python block") + "```python\n".len();
    let code = &block[code_start..code_start + block[code_start..].find("```").expect("the code block ends")];
    let secret = "whsec_readme-example-secret";
    let body = r#"{"id":7,"type":"bid.countered"}"#;
    let now = chrono::Utc::now().timestamp();
    let good = sign(secret, now, body.as_bytes());
    let stale = sign(secret, now - 3600, body.as_bytes());
    let other = sign("whsec_another", now, body.as_bytes());
    let script = format!(
        "{code}\nbody = {body:?}.encode()\n\
         assert verify({secret:?}, {good:?}, body)\n\
         assert not verify({secret:?}, {good:?}, body + b' ')\n\
         assert not verify({secret:?}, {stale:?}, body)\n\
         assert not verify({secret:?}, {other:?}, body)\n\
         print('verified')\n"
    );
    let output = tokio::process::Command::new("python3").args(["-c", &script]).output().await.expect("run python3");
    assert!(
        output.status.success() && String::from_utf8_lossy(&output.stdout).contains("verified"),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The `haggle sim` example in docs/CLI.md prints what the page shows.
#[tokio::test]
async fn the_documented_sim_example_prints_what_it_shows() {
    let cli = doc("docs/CLI.md");
    let start = cli.find("$ haggle sim ").expect("docs/CLI.md shows a haggle sim run");
    let block = &cli[start..start + cli[start..].find("```").expect("the block ends")];
    let mut lines = block.lines();
    let command = lines.next().unwrap().trim_start_matches("$ haggle ");
    let output = tokio::process::Command::new(crate::support::haggle_bin())
        .args(command.split_whitespace())
        .output()
        .await
        .expect("run haggle sim");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    for line in lines.filter(|line| !line.trim().is_empty() && line.trim() != "...") {
        assert!(stdout.lines().any(|printed| printed == line), "haggle sim prints {line:?}:\n{stdout}");
    }
}
