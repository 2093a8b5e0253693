//! The README's curl walkthrough, run verbatim against a live server.

use crate::support::{ServerProcess, TestDb};

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

/// The shell code of a block of README.md between `<!-- name -->` and `<!-- /name -->`.
fn shell_block(name: &str) -> String {
    let readme = readme();
    let start = readme.find(&format!("<!-- {name} -->")).expect("README has the block");
    let end = readme.find(&format!("<!-- /{name} -->")).expect("README's block ends");
    let block = &readme[start..end];
    let code_start = block.find("```sh\n").expect("the walkthrough is a sh code block") + "```sh\n".len();
    let code_end = block[code_start..].find("```").expect("the code block ends") + code_start;
    block[code_start..code_end].to_owned()
}

/// Runs a README shell block against a fresh server; returns what it printed.
pub async fn run_block(name: &str) -> String {
    let db = TestDb::create().await;
    let token = "walkthrough-operator-token-42";
    let server = ServerProcess::spawn(&[("DATABASE_URL", db.url.as_str()), ("HAGGLE_ADMIN_TOKEN", token)]);
    let script = shell_block(name);
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
        "the README's {name} block failed\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver:\n{}",
        server.log()
    );
    stdout
}

/// Each line is printed by the block and shown in the README.
pub fn prints(stdout: &str, lines: &[&str]) {
    for line in lines {
        assert!(stdout.lines().any(|l| l == *line), "the block prints {line}:\n{stdout}");
        assert!(readme().contains(line), "the README shows {line}");
    }
}

#[tokio::test]
async fn the_readme_walkthrough_works_verbatim() {
    let stdout = run_block("walkthrough").await;
    // What the README says the walkthrough prints.
    prints(
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
async fn the_readme_auto_negotiation_works_verbatim() {
    let stdout = run_block("auto-negotiation").await;
    prints(
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

/// The README's signature check, in Python, accepts what the server signs and refuses the rest.
#[tokio::test]
async fn the_readme_signature_check_works() {
    use haggle_server::webhooks::signature::sign;
    let readme = readme();
    let start = readme.find("<!-- verify-signature -->").expect("README shows how to verify a signature");
    let end = readme.find("<!-- /verify-signature -->").expect("the block ends");
    let block = &readme[start..end];
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

/// The README's `haggle sim` example prints what the README shows.
#[tokio::test]
async fn the_readme_sim_example_prints_what_it_shows() {
    let readme = readme();
    let start = readme.find("$ haggle sim ").expect("README shows a haggle sim run");
    let block = &readme[start..start + readme[start..].find("```").expect("the block ends")];
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
