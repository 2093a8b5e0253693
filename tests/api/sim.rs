//! `haggle sim` as a user runs it: no server, no database, files written where asked.

use std::process::Command;

use serde_json::Value;

use crate::support::haggle_bin;

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(haggle_bin()).arg("sim").args(args).env("RUST_LOG", "warn").output().unwrap()
}

#[test]
fn a_seeded_market_writes_the_same_report_twice() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str| {
        let json = dir.path().join(name);
        let charts = dir.path().join(format!("{name}-svg"));
        let output = sim(&[
            "--seed",
            "5",
            "--buyers",
            "balanced:4,adaptive:3,tft:2",
            "--sellers",
            "tier:3,split:2,time-boulware:2",
            "--learn",
            "q",
            "--episodes",
            "2000",
            "--json",
            json.to_str().unwrap(),
            "--svg",
            charts.to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(stderr.contains("training: 200/2000 episodes (10%)"), "progress goes to stderr: {stderr}");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(!stdout.contains("training: "), "no progress on stdout");
        (std::fs::read(&json).unwrap(), std::fs::read(charts.join("training.svg")).unwrap(), stdout)
    };
    let (first, first_chart, stdout) = run("a.json");
    let (second, second_chart, _) = run("b.json");
    assert_eq!(first, second, "same seed, same bytes");
    assert_eq!(first_chart, second_chart);
    assert!(stdout.contains("agreement rate over feasible pairs"), "{stdout}");
    assert!(stdout.contains("tournament"), "{stdout}");

    let summary: Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(summary["overall"]["negotiations"], (9 + 4) * (7 + 3));
    assert_eq!(summary["overall"]["deals_infeasible"], 0);
    assert_eq!(summary["overall"]["limit_violations"], 0);
    assert_eq!(summary["overall"]["rule_breaks"], 0);
    assert!(summary["buyers"].as_array().unwrap().iter().any(|b| b["strategy"] == "q"));
}

#[test]
fn a_bad_mix_is_refused_with_the_strategies_named() {
    let output = sim(&["--buyers", "haggler:3"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown buyer strategy `haggler`") && stderr.contains("adaptive"), "{stderr}");
}
