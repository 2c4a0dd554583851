//! The kernel pass's verdicts as data: docs/mutants/STEM.tsv holds one row per mutant of
//! kernels/cuda/STEM.cu (numbered within its source), written by the pass as it judges, each row
//! settled where its mutant now lives, and read by `cargo xtask mutants --summary [--check]`
//! (summary.rs), which renders the summary table of docs/testing.md.
//! A `Missed` row needs an argument, written by hand: `equivalent: why`, or `gap, closed: the
//! test that now fails on it`.

use super::mutations::{Mutant, mutants_of};
use crate::util::root;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;

pub(super) const DIR: &str = "docs/mutants";
const COLUMNS: &str = "mutant\tkey\tline\toriginal\treplacement\tverdict\tjudged\targument";
const HEADER: &str = "\
# Verdicts of the kernel mutation pass (`cargo xtask mutants --kernels`), one row per mutant of
# the source, numbered as `cargo xtask mutants --kernels --list --source STEM` numbers them. The
# pass writes a row for each mutant it judges; `argument` is written by hand for every `Missed`
# row: `equivalent: why` or `gap, closed: the test that now fails on it`. `NotItemized`: judged
# and not missed (killed, timed out, unviable or identical PTX) by a pass that kept only its
# tallies. `key` identifies the mutant wherever its code moves (the change and the text around
# it, hashed): a verdict follows its code into another line or file, so splitting a source costs
# no re-judging. `cargo xtask mutants --summary` reads these files into docs/testing.md.
";
/// How a `Missed` row's argument starts: proven equivalent, or a gap a test now closes.
pub(super) const EQUIVALENT: &str = "equivalent:";
pub(super) const GAP_CLOSED: &str = "gap, closed:";

/// One mutant's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Verdict {
    pub(super) mutant: usize,
    /// The mutant's [`Mutant::key`] (empty in a row written before keys).
    pub(super) key: String,
    pub(super) line: usize,
    pub(super) original: String,
    pub(super) replacement: String,
    /// The judge's outcome (`Killed`, `Missed`, `SamePtxAs(#N)`, ...), or `NotItemized`.
    pub(super) verdict: String,
    /// The date and commit it was judged at.
    pub(super) judged: String,
    pub(super) argument: String,
}

impl Verdict {
    /// Whether it is the verdict on `mutant` as the source stands: by key, or, for a row written
    /// before keys, by number, line and change.
    pub(super) fn is_of(&self, mutant: &Mutant) -> bool {
        if !self.key.is_empty() {
            return self.key == mutant.key;
        }
        self.line == mutant.line && self.original == mutant.original && self.replacement == mutant.replacement
    }
}

fn path_of(stem: &str) -> PathBuf {
    root().join(DIR).join(format!("{stem}.tsv"))
}

/// The verdicts on `stem`'s mutants, by number (none when the file does not exist).
pub(super) fn read(stem: &str) -> Result<BTreeMap<usize, Verdict>, String> {
    let path = path_of(stem);
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(BTreeMap::new()) };
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn parse(text: &str) -> Result<BTreeMap<usize, Verdict>, String> {
    let mut verdicts = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        // The column names (this version's, or the one before keys).
        if line.starts_with('#') || line.starts_with("mutant\t") || line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        // Rows written before keys have no key column; `--summary` keys them.
        let [mutant, key, at, original, replacement, verdict, judged, argument] = match fields[..] {
            [mutant, at, original, replacement, verdict, judged, argument] => {
                [mutant, "", at, original, replacement, verdict, judged, argument]
            }
            [_, _, _, _, _, _, _, _] => fields[..].try_into().map_err(|_| "eight fields".to_string())?,
            _ => return Err(format!("line {}: expected 8 tab-separated fields ({COLUMNS})", number + 1)),
        };
        let whole = |s: &str| s.parse::<usize>().map_err(|_| format!("line {}: {s:?} is not a number", number + 1));
        let row = Verdict {
            mutant: whole(mutant)?,
            key: key.into(),
            line: whole(at)?,
            original: original.into(),
            replacement: replacement.into(),
            verdict: verdict.into(),
            judged: judged.into(),
            argument: argument.into(),
        };
        if verdicts.insert(row.mutant, row).is_some() {
            return Err(format!("line {}: mutant #{mutant} twice", number + 1));
        }
    }
    Ok(verdicts)
}

fn render_rows(verdicts: &BTreeMap<usize, Verdict>) -> String {
    let mut text = format!("{HEADER}{COLUMNS}\n");
    for v in verdicts.values() {
        let _ = writeln!(
            text,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            v.mutant, v.key, v.line, v.original, v.replacement, v.verdict, v.judged, v.argument
        );
    }
    text
}

/// Records a verdict on `stem`'s mutant `verdict.mutant` (numbered as the pass's checkout
/// numbers it), at the number and line its key has in the sources as they stand (as given where
/// its code is gone), replacing the mutant's earlier one wherever it was. The argument written for an earlier `Missed` of the same change is kept while
/// the verdict stays `Missed`. Every other row is then settled where its mutant now lives
/// ([`settle`]), so a row whose code moved to another source is never overwritten by the verdict
/// on the mutant that now has its old number.
pub(super) fn record(stem: &str, mut verdict: Verdict) -> Result<(), String> {
    let sources = current_sources()?;
    let files = read_all(sources.iter().map(|(stem, _)| stem.as_str()))?;
    let earlier = files.values().flat_map(|rows| rows.values()).find(|row| row.key == verdict.key);
    if let Some(earlier) = earlier
        && verdict.argument.is_empty()
        && earlier.verdict == verdict.verdict
    {
        verdict.argument = earlier.argument.clone();
    }
    let homes = homes(&sources);
    let placed = place(stem, verdict, &homes);
    write_changed(&files, &settle(&files, &homes, Some(&placed)))
}

/// Where a verdict the pass judged goes: the pass numbers its mutants in its own checkout of
/// HEAD, which the working tree's sources may have moved on from, so a verdict goes where its
/// mutant lives now (by key: stem, number, line) and never takes another mutant's number; where
/// its code is gone, at the stem and number it was judged at.
fn place(stem: &str, verdict: Verdict, homes: &BTreeMap<String, (String, usize, usize)>) -> (String, Verdict) {
    match homes.get(&verdict.key).filter(|_| !verdict.key.is_empty()) {
        Some((home, number, line)) => (home.clone(), Verdict { mutant: *number, line: *line, ..verdict }),
        None => (stem.to_string(), verdict),
    }
}

/// Every kernel source's stem and current mutants.
pub(super) fn current_sources() -> Result<Vec<(String, Vec<Mutant>)>, String> {
    crate::kernels::mutated_files()?
        .into_iter()
        .map(|path| Ok((path.file_stem().unwrap_or_default().to_string_lossy().into_owned(), mutants_of(&path)?)))
        .collect()
}

/// The rows of each of `stems`, by stem (empty where it has no file).
pub(super) fn read_all<'a>(
    stems: impl IntoIterator<Item = &'a str>,
) -> Result<BTreeMap<String, BTreeMap<usize, Verdict>>, String> {
    stems.into_iter().map(|stem| Ok((stem.to_string(), read(stem)?))).collect()
}

/// Where each current mutant lives, by key: its source's stem, its number there and its line.
pub(super) fn homes(sources: &[(String, Vec<Mutant>)]) -> BTreeMap<String, (String, usize, usize)> {
    sources
        .iter()
        .flat_map(|(stem, mutants)| {
            mutants.iter().enumerate().map(move |(n, m)| (m.key.clone(), (stem.clone(), n, m.line)))
        })
        .collect()
}

/// The rows of every file (`files`, by stem) rearranged so each row whose mutant exists (its key
/// is in `homes`) sits in its source's file at its current number and line, the most recently
/// judged row winning where two record one mutant (by date; of two judged the same day, the one
/// read last); `placed` (a stem and a verdict just judged)
/// goes where it says and wins over any row of its key. A row whose code is gone (or written
/// before keys) stays at its number in its file unless a live row needs the place.
pub(super) fn settle(
    files: &BTreeMap<String, BTreeMap<usize, Verdict>>,
    homes: &BTreeMap<String, (String, usize, usize)>,
    placed: Option<&(String, Verdict)>,
) -> BTreeMap<String, BTreeMap<usize, Verdict>> {
    let mut live: BTreeMap<&str, Verdict> = BTreeMap::new();
    let mut gone: Vec<(&str, &Verdict)> = Vec::new();
    for (stem, rows) in files {
        for row in rows.values() {
            let Some((_, number, line)) = homes.get(&row.key).filter(|_| !row.key.is_empty()) else {
                gone.push((stem, row));
                continue;
            };
            if live.get(row.key.as_str()).is_some_and(|newer| newer.judged > row.judged) {
                continue;
            }
            live.insert(row.key.as_str(), Verdict { mutant: *number, line: *line, ..row.clone() });
        }
    }
    let mut settled: BTreeMap<String, BTreeMap<usize, Verdict>> = BTreeMap::new();
    if let Some((stem, verdict)) = placed {
        live.remove(verdict.key.as_str());
        settled.entry(stem.clone()).or_default().insert(verdict.mutant, verdict.clone());
    }
    for (key, row) in live {
        let (home, number, _) = &homes[key];
        settled.entry(home.clone()).or_default().entry(*number).or_insert(row);
    }
    for (stem, row) in gone {
        settled.entry(stem.to_string()).or_default().entry(row.mutant).or_insert_with(|| row.clone());
    }
    settled
}

/// Writes each file whose rows `settled` changed (a file that had no rows and gets none stays
/// absent).
pub(super) fn write_changed(
    files: &BTreeMap<String, BTreeMap<usize, Verdict>>,
    settled: &BTreeMap<String, BTreeMap<usize, Verdict>>,
) -> Result<(), String> {
    let empty = BTreeMap::new();
    let stems: std::collections::BTreeSet<&String> = files.keys().chain(settled.keys()).collect();
    for stem in stems {
        let (before, after) = (files.get(stem).unwrap_or(&empty), settled.get(stem).unwrap_or(&empty));
        if before == after || (after.is_empty() && !path_of(stem).exists()) {
            continue;
        }
        let path = path_of(stem);
        std::fs::create_dir_all(root().join(DIR)).map_err(|e| format!("cannot create {DIR}: {e}"))?;
        std::fs::write(&path, render_rows(after)).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// The verdict on mutant `number` of a file as the source stands: the row with its key in any
/// file (`keyed`), else a row written before keys at its number in the file's own rows
/// (`verdicts`) recording the same line and change (one recording another change there is stale:
/// the source changed since, and the caller counts the row so).
pub(super) fn verdict_of<'a>(
    number: usize,
    mutant: &Mutant,
    verdicts: &'a BTreeMap<usize, Verdict>,
    keyed: &'a BTreeMap<String, Verdict>,
) -> Option<&'a Verdict> {
    keyed.get(&mutant.key).or_else(|| verdicts.get(&number).filter(|v| v.key.is_empty())).filter(|v| v.is_of(mutant))
}

/// The numbers of `stem`'s mutants (`mutants`, as `mutants_of` lists them) with no verdict as the
/// source stands, whichever file's rows hold it: what is left for a pass that resumes.
pub(super) fn unjudged(stem: &str, mutants: &[Mutant]) -> Result<Vec<usize>, String> {
    let stems: Vec<String> = crate::kernels::mutated_files()?
        .iter()
        .map(|path| path.file_stem().unwrap_or_default().to_string_lossy().into_owned())
        .collect();
    let files = read_all(stems.iter().map(String::as_str))?;
    let keyed = keyed_rows(files.values());
    let empty = BTreeMap::new();
    let own = files.get(stem).unwrap_or(&empty);
    Ok((0..mutants.len()).filter(|&n| verdict_of(n, &mutants[n], own, &keyed).is_none()).collect())
}

/// Every row of every file, by key (rows written before keys are left out).
pub(super) fn keyed_rows<'a>(all: impl IntoIterator<Item = &'a BTreeMap<usize, Verdict>>) -> BTreeMap<String, Verdict> {
    all.into_iter()
        .flat_map(|rows| rows.values())
        .filter(|v| !v.key.is_empty())
        .map(|v| (v.key.clone(), v.clone()))
        .collect()
}

/// Gives the rows written before keys the key of the mutant they judged, where the mutant at
/// their number is still the one they record (same line and change); returns whether any row
/// changed.
pub(super) fn add_keys(mutants: &[Mutant], verdicts: &mut BTreeMap<usize, Verdict>) -> bool {
    let mut changed = false;
    for (number, row) in verdicts.iter_mut() {
        if let Some(mutant) = mutants.get(*number)
            && row.key.is_empty()
            && row.is_of(mutant)
        {
            row.key = mutant.key.clone();
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::mutants::summary::stale;

    pub(crate) fn mutant(line: usize, key: &str) -> Mutant {
        Mutant {
            file: PathBuf::from("k.cu"),
            line,
            start: 0,
            end: 0,
            original: "<".into(),
            replacement: "<=".into(),
            key: key.into(),
        }
    }

    pub(crate) fn verdict(mutant: usize, key: &str, line: usize, verdict: &str, argument: &str) -> Verdict {
        Verdict {
            mutant,
            key: key.into(),
            line,
            original: "<".into(),
            replacement: "<=".into(),
            verdict: verdict.into(),
            judged: "2026-12-05 abc1234".into(),
            argument: argument.into(),
        }
    }

    #[test]
    fn rows_survive_a_round_trip_and_bad_rows_are_refused() {
        let rows: BTreeMap<usize, Verdict> = [
            (0, verdict(0, "00aa", 3, "Killed", "")),
            (1, verdict(1, "00bb#1", 4, "Missed", "equivalent: the bound is never reached")),
            (2, verdict(2, "", 4, "SamePtxAs(#1)", "")),
        ]
        .into();
        assert_eq!(parse(&render_rows(&rows)), Ok(rows));
        assert!(parse("0\t3\t<\t<=\tKilled\t2026-12-05").is_err(), "six fields");
        let old = parse("0\t3\t<\t<=\tKilled\t2026-12-05\t").expect("a row written before keys");
        assert_eq!((old[&0].key.as_str(), old[&0].line), ("", 3));
        assert!(parse("x\tk\t3\t<\t<=\tKilled\t-\t").is_err(), "not a number");
        assert!(parse("0\tk\t3\t<\t<=\tKilled\t-\t\n0\tk\t3\t<\t<=\tKilled\t-\t").is_err(), "twice");
    }

    #[test]
    fn rows_written_before_keys_take_the_key_of_the_mutant_they_judged() {
        let mutants = [mutant(3, "a"), mutant(4, "b")];
        let mut rows: BTreeMap<usize, Verdict> =
            [(0, verdict(0, "", 3, "Killed", "")), (1, verdict(1, "", 7, "Killed", ""))].into();
        assert!(add_keys(&mutants, &mut rows));
        assert_eq!(rows[&0].key, "a", "same number, line and change");
        assert_eq!(rows[&1].key, "", "another line: the source changed, no key is guessed");
        let current = mutants.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(stale(&rows, &mutants, &current), 1);
    }

    #[test]
    fn a_mutant_is_unjudged_until_a_row_records_it_as_the_source_stands() {
        let mutants = [mutant(3, "a"), mutant(4, "b"), mutant(5, "c"), mutant(6, "d")];
        // a: a row written before keys, same line and change; b: one for another line (stale).
        let rows: BTreeMap<usize, Verdict> =
            [(0, verdict(0, "", 3, "Killed", "")), (1, verdict(1, "", 7, "Killed", ""))].into();
        // c's code moved here from another file, whose row keeps its verdict; d has none.
        let other: BTreeMap<usize, Verdict> = [(9, verdict(9, "c", 50, "Killed", ""))].into();
        let keyed = keyed_rows([&rows, &other]);
        let judged: Vec<bool> = (0..4).map(|n| verdict_of(n, &mutants[n], &rows, &keyed).is_some()).collect();
        assert_eq!(judged, [true, false, true, false]);
    }

    #[test]
    fn rows_settle_where_their_code_now_lives_and_a_new_verdict_displaces_none_that_lives() {
        // The source `a` now has mutants x (#0) and y (#1); `b` has z (#0), whose code came from
        // `a`, where its row still sits at #0 with an older one of y's at #1.
        let homes: BTreeMap<String, (String, usize, usize)> = [
            ("x".to_string(), ("a".to_string(), 0, 10)),
            ("y".to_string(), ("a".to_string(), 1, 11)),
            ("z".to_string(), ("b".to_string(), 0, 20)),
        ]
        .into();
        let mut old_y = verdict(1, "y", 9, "Killed", "");
        old_y.judged = "2026-12-01 aaaaaaa".into();
        let files: BTreeMap<String, BTreeMap<usize, Verdict>> = [
            (
                "a".to_string(),
                [
                    (0, verdict(0, "z", 7, "Missed", "equivalent: never reached")),
                    (1, old_y),
                    (5, verdict(5, "gone", 3, "Killed", "")),
                ]
                .into(),
            ),
            ("b".to_string(), [(1, verdict(1, "y", 30, "Unviable", ""))].into()),
        ]
        .into();
        // The pass judges x, whose number is z's old one.
        let x = ("a".to_string(), verdict(0, "x", 10, "Killed", ""));
        let settled = settle(&files, &homes, Some(&x));
        assert_eq!(settled["a"][&0].key, "x", "the new verdict where it was judged");
        let z = &settled["b"][&0];
        assert_eq!(
            (z.key.as_str(), z.line, z.argument.as_str()),
            ("z", 20, "equivalent: never reached"),
            "z moved, kept"
        );
        let y = &settled["a"][&1];
        assert_eq!((y.verdict.as_str(), y.line), ("Unviable", 11), "the later of y's two rows, at y's place");
        assert_eq!(settled["a"][&5].key, "gone", "a row whose code is gone stays where it was");
        assert_eq!(settled.values().map(BTreeMap::len).sum::<usize>(), 4, "y once");
    }

    #[test]
    fn a_verdict_numbered_in_an_older_checkout_goes_where_its_mutant_lives_now() {
        // Mutants moved up by 8 since the pass's checkout: its #126 (key "k") is #134 now, and
        // #126 is another mutant's ("j"), whose row must survive the new verdict.
        let homes: BTreeMap<String, (String, usize, usize)> =
            [("k".to_string(), ("a".to_string(), 134, 140)), ("j".to_string(), ("a".to_string(), 126, 123))].into();
        let files: BTreeMap<String, BTreeMap<usize, Verdict>> =
            [("a".to_string(), [(126, verdict(126, "j", 123, "IdenticalPtx", ""))].into())].into();
        let placed = place("a", verdict(126, "k", 140, "Killed", ""), &homes);
        assert_eq!((placed.0.as_str(), placed.1.mutant, placed.1.line), ("a", 134, 140));
        let settled = settle(&files, &homes, Some(&placed));
        assert_eq!(settled["a"][&126].key, "j", "the row already at #126 stays");
        assert_eq!(settled["a"][&134].key, "k", "the verdict at its mutant's number now");
        let gone = place("a", verdict(7, "gone", 3, "Killed", ""), &homes);
        assert_eq!((gone.0.as_str(), gone.1.mutant), ("a", 7), "code that is gone keeps the number it had");
    }
}
