//! Migrations are frozen once committed: a database that applied one records its checksum, and a
//! changed file would stop that database from starting. A change is a new numbered file. The
//! checksums below catch an edit made alone; the repository's history catches one committed
//! together with a new checksum.

use std::collections::BTreeMap;

use sha2::{Digest, Sha384};

/// Every committed migration and its SHA-384, as sqlx records it. Add a line for a new migration;
/// never change one.
const COMMITTED: &[(&str, &str)] = &[
    (
        "0001_baseline.sql",
        "34a3ec8c2e108b5134afea5cf3b6692d2c1822ccac8af8e7d88e2a2089d1c48423c401990f5c1aa8b6754941238fc6af",
    ),
    (
        "0002_quotes.sql",
        "1422c38af382c9f42c93ceaff32b490304d29a3cb83e1a07ecc601a8718ef1351115b8364cd0bb5c0e7e7f7eba91bee7",
    ),
    (
        "0003_instances.sql",
        "094d52f7e24ec2d800701b0d8510597c99278c4afbe97b75ece5b714478f37f416886e32af1d00ec05d893cde95eecd4",
    ),
    (
        "0004_delivery_claims.sql",
        "cd8b4fe0fd6e612fb190ce67c07c7d7abdc1f7b3426f3eb71e93f33e5ee94b3909d24a06ab37b934769129f0b6e5eca3",
    ),
    (
        "0005_agent_suspension.sql",
        "edd38474a21b551792b4ebe7f15be709099ffcf98fa63224e9cdf399e226b7a53ed0f039d6f3eded7dd2615dc8b8dfd5",
    ),
    (
        "0006_issues_and_deadlocks.sql",
        "ebaf4f0cd5f077dcc18d1b87a9932012d09af14e116325cf69c17518aade61f42d83072c285204d413790253e14c012c",
    ),
    (
        "0007_history_indexes.sql",
        "3a490f07f0b2f81bfb0eeb33f481e3ad43b47d62ebe6c74d8398a2614fc34ac4e6a3d51ca970dd23974d10675706eacf",
    ),
    (
        "0008_console_sessions.sql",
        "d476f183e3e1140d9fd1ff409b948c071ebaf87e65db7304df32ecf2463dd5d1351194e878459ed1a47d97f98fadcbb8",
    ),
    (
        "0009_order_life.sql",
        "d6b845db10fa556e23294a06f009aa52e20f0be1b2a1e5784c825fb49b84497644d8f53bbde6432315a416c6ac90dfc2",
    ),
    (
        "0010_order_negotiations.sql",
        "0d8da2c2404c8038622c411521c6f454080e12a0bfc824936670a8d47fc1f8a0ef7ea4694e56ffe82930139ceea70c65",
    ),
    (
        "0011_approvals.sql",
        "0f76dd6f66c7fbd0089c8547ba1226e22f032ef77d104bf7a91e444cf28704cdc5888716390596adbe345a0b1b6b7fde",
    ),
    (
        "0012_event_types.sql",
        "fff64e0f309d4a5274fa7fdf6f661a795dbdfeedd81ba78a4302688b734d6930f17d24cc2161a64d38518be9a91974a0",
    ),
    (
        "0013_schedules_installments.sql",
        "7015b802d8e6965eaa240ee42d2b8ab8a2d7861bf26eff1375c4048de0f0b7949554c992609a06231b6387db95ecc1ff",
    ),
    (
        "0014_approver_sessions.sql",
        "666ebdce5b07773aec5d54a9fc58a710907070b11c6b18a5655b44afd028daf2f9b2f88c46043830feaa68a95f3f4b10",
    ),
    (
        "0015_refund_approvals.sql",
        "455dd9954c91da26a81db505d52891ddc6d97fb7a2261db262e3ccaf33a512c768c6f42d5e527e559a657dc8607f45b1",
    ),
    (
        "0016_events_written_once.sql",
        "89d6db17279adb51cd55b1c3ab2ad83fd6943a820f5a3eb25af03950476f1ca4282bf09871198c26575541c1b3718bc8",
    ),
    (
        "0017_concession_rule.sql",
        "a5ad78184c01cae465d1df85f35f51ee794c096d3bcb81c7ac518d6a9220e705bfd5639931c8f940e1cd6f3fc2634c68",
    ),
];

fn files() -> BTreeMap<String, Vec<u8>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations");
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
        .map(|path| (path.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&path).unwrap()))
        .collect()
}

#[test]
fn committed_migrations_never_change() {
    let files = files();
    for (name, expected) in COMMITTED {
        let Some(sql) = files.get(*name) else {
            panic!("the committed migration {name} is gone; migrations are never removed");
        };
        let checksum = hex::encode(Sha384::digest(sql));
        assert_eq!(
            &checksum, expected,
            "{name} changed after it was committed; a database that applied it would refuse to start. \
             Put the change in a new migration with the next number"
        );
    }
    for name in files.keys() {
        assert!(
            COMMITTED.iter().any(|(committed, _)| committed == name),
            "{name} has no checksum in tests/api/migrations.rs: add it to COMMITTED when you commit it \
             (its SHA-384: {})",
            hex::encode(Sha384::digest(&files[name]))
        );
    }
}

#[test]
fn migrations_are_numbered_without_gaps() {
    let numbers: Vec<u32> = files()
        .keys()
        .map(|name| name.split('_').next().unwrap().parse().unwrap_or_else(|_| panic!("{name}: no number")))
        .collect();
    let expected: Vec<u32> = (1..=numbers.len() as u32).collect();
    assert_eq!(numbers, expected, "migrations are numbered 1, 2, 3, ... with no gap or repeat");
}

#[test]
fn the_server_embeds_the_committed_migrations() {
    let embedded: Vec<(i64, String)> = haggle_server::db::MIGRATOR
        .iter()
        .map(|migration| (migration.version, hex::encode(&migration.checksum)))
        .collect();
    let committed: Vec<(i64, String)> = COMMITTED
        .iter()
        .map(|(name, checksum)| (name.split('_').next().unwrap().parse().unwrap(), checksum.to_string()))
        .collect();
    assert_eq!(embedded, committed, "the binary applies exactly the committed migrations");
}

/// Runs git in the repository; `None` if it fails (no git, or not a checkout).
fn git(args: &[&str]) -> Option<Vec<u8>> {
    let output =
        std::process::Command::new("git").arg("-C").arg(env!("CARGO_MANIFEST_DIR")).args(args).output().ok()?;
    output.status.success().then_some(output.stdout)
}

fn git_text(args: &[&str]) -> String {
    String::from_utf8(git(args).unwrap_or_else(|| panic!("git {}", args.join(" ")))).expect("git speaks UTF-8")
}

#[test]
fn no_committed_migration_was_ever_edited() {
    // Without the history there is nothing to compare with: a source archive, or a shallow clone
    // (CI refuses those before it runs the tests).
    match git(&["rev-parse", "--is-shallow-repository"]).map(|out| String::from_utf8_lossy(&out).trim().to_owned()) {
        Some(shallow) if shallow == "false" => {}
        Some(_) => {
            eprintln!("not checked: a shallow clone lacks the migrations' history (git fetch --unshallow)");
            return;
        }
        None => {
            eprintln!(
                "not checked: no git history here (not a git checkout, or no git) to compare the migrations with"
            );
            return;
        }
    }
    let files = files();
    for (name, sql) in &files {
        let path = format!("migrations/{name}");
        // The commit that added the file as it stands (a file removed and added again starts over).
        let added = git_text(&["log", "--no-renames", "--diff-filter=A", "--format=%H", "-1", "--", &path]);
        let added = added.trim();
        if added.is_empty() {
            continue; // not committed yet; the checksum test asks for its line
        }
        let edits = git_text(&[
            "log",
            "--no-renames",
            "--diff-filter=M",
            "--format=%h %s",
            &format!("{added}..HEAD"),
            "--",
            &path,
        ]);
        assert!(
            edits.trim().is_empty(),
            "{name} was edited after the commit that added it ({added}), by:\n{edits}\
             A committed migration is never changed, even with its checksum: put the change in a new migration"
        );
        let committed = git(&["show", &format!("{added}:{path}")]).expect("the committed migration");
        assert!(
            committed == *sql,
            "{name} differs from the version its commit ({added}) added; put the change in a new migration"
        );
    }
}
