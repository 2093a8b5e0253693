//! The README's curl walkthrough, run verbatim against a live server.

use crate::support::{ServerProcess, TestDb};

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

/// The shell code of the walkthrough block of README.md.
fn walkthrough() -> String {
    let readme = readme();
    let start = readme.find("<!-- walkthrough -->").expect("README has a walkthrough block");
    let end = readme.find("<!-- /walkthrough -->").expect("README's walkthrough block ends");
    let block = &readme[start..end];
    let code_start = block.find("```sh\n").expect("the walkthrough is a sh code block") + "```sh\n".len();
    let code_end = block[code_start..].find("```").expect("the code block ends") + code_start;
    block[code_start..code_end].to_owned()
}

#[tokio::test]
async fn the_readme_walkthrough_works_verbatim() {
    let db = TestDb::create().await;
    let token = "walkthrough-operator-token-42";
    let server = ServerProcess::spawn(&[("DATABASE_URL", db.url.as_str()), ("HAGGLE_ADMIN_TOKEN", token)]);
    let script = walkthrough();
    let output = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .env("HAGGLE_URL", &server.base)
        .env("HAGGLE_ADMIN_TOKEN", token)
        .output()
        .await
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the walkthrough failed\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver:\n{}",
        server.log()
    );
    // What the README says the walkthrough prints.
    for line in [
        r#"{"name":"desk-buyer","tier":"AGENCY"}"#,
        r#"{"amount":130000,"currency":"USD","status":"CONFIRMED"}"#,
        r#"{"status":"ACCEPTED","rounds":3}"#,
        r#"{"status":"COUNTERED"}"#,
        r#"["bid.placed","bid.countered","bid.countered","bid.accepted","order.created"]"#,
    ] {
        assert!(stdout.lines().any(|l| l == line), "the walkthrough prints {line}:\n{stdout}");
        assert!(readme().contains(line), "the README shows {line}");
    }
}
