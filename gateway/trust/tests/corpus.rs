//! The poisoning checks against `corpus/tools.jsonl`: real published tool definitions (good)
//! beside published and paraphrased attacks (bad), written apart from the checks. Every bad
//! definition must be flagged and no good one; the false positives and negatives are printed
//! (`cargo test -p switchboard-trust --test corpus -- --nocapture`).

use serde_json::Value;
use switchboard_trust::inspect;

#[test]
fn every_bad_definition_is_flagged_and_no_good_one() {
    measure("tools.jsonl", 60, 40);
}

/// The held-out corpus, written apart from both the checks and the first corpus, after the
/// checks were tuned on the first: what the checks do on definitions nobody tuned them to.
#[test]
fn the_held_out_corpus() {
    measure("holdout.jsonl", 40, 30);
}

/// A third corpus, written last and never tuned on: only printed, and held to the one hard
/// line (no good tool flagged); its misses are the checks' measured reach.
#[test]
fn the_untouched_corpus_flags_no_good_tool() {
    let (false_positives, _) = run("holdout2.jsonl", 40, 40);
    assert!(
        false_positives.is_empty(),
        "false positives: {false_positives:#?}"
    );
}

fn measure(file: &str, min_good: usize, min_bad: usize) {
    let (false_positives, false_negatives) = run(file, min_good, min_bad);
    assert!(
        false_positives.is_empty() && false_negatives.is_empty(),
        "false positives: {false_positives:#?}\nfalse negatives: {false_negatives:#?}"
    );
}

/// Runs the checks over a corpus, prints the figures, and returns (false positives, false
/// negatives).
fn run(file: &str, min_good: usize, min_bad: usize) -> (Vec<String>, Vec<String>) {
    let dir = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for tests"),
    );
    let text = std::fs::read_to_string(dir.join("corpus").join(file)).expect("the corpus");
    let (mut good, mut bad) = (0, 0);
    let mut false_positives = Vec::new();
    let mut false_negatives = Vec::new();
    let mut other_kind = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let case: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("corpus line {}: {e}", i + 1));
        let id = case["id"].as_str().unwrap_or_default().to_string();
        let findings = inspect(&case["tool"]);
        match case["expect"].as_str() {
            Some("good") => {
                good += 1;
                if !findings.is_empty() {
                    let f: Vec<String> = findings.iter().map(ToString::to_string).collect();
                    false_positives.push(format!("{id}: {}", f.join("; ")));
                }
            }
            Some("bad") => {
                bad += 1;
                let want = case["category"].as_str().unwrap_or_default();
                if findings.is_empty() {
                    false_negatives.push(format!("{id} ({want})"));
                } else if !findings.iter().any(|f| f.kind.as_str() == want) {
                    let got: Vec<&str> = findings.iter().map(|f| f.kind.as_str()).collect();
                    other_kind.push(format!("{id}: expected {want}, found {}", got.join(", ")));
                }
            }
            other => panic!("corpus line {}: expect {other:?}", i + 1),
        }
    }
    println!(
        "corpus {file}: {good} good, {bad} bad; false positives {} ({:.1} %), false negatives {} ({:.1} %); flagged under another kind: {}",
        false_positives.len(),
        100.0 * false_positives.len() as f64 / good.max(1) as f64,
        false_negatives.len(),
        100.0 * false_negatives.len() as f64 / bad.max(1) as f64,
        other_kind.len()
    );
    for line in false_positives
        .iter()
        .chain(&false_negatives)
        .chain(&other_kind)
    {
        println!("  {line}");
    }
    assert!(
        good >= min_good && bad >= min_bad,
        "the corpus is too small: {good} good, {bad} bad"
    );
    (false_positives, false_negatives)
}
