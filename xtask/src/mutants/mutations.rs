//! The kernel sources' mutants: a small C++ tokenizer (comments, literals and preprocessor lines
//! skipped) and the operator and constant replacements applied one at a time.

use std::path::{Path, PathBuf};

/// One source change.
#[derive(Debug, Clone)]
pub(super) struct Mutant {
    pub(super) file: PathBuf,
    pub(super) line: usize,
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) original: String,
    pub(super) replacement: String,
    /// What identifies the mutant wherever its code moves (docs/mutants/ keys verdicts by it):
    /// a hash of the change and the text around it (its line and up to two on each side, not
    /// past a blank line; white space folded), with `#N` for the N-th repeat of that hash in the
    /// file.
    pub(super) key: String,
}

/// The token-level mutations: operators swapped for a neighbour, integer literals moved by one,
/// `continue` turned into `break`, `0.0f` into `1.0f`.
pub(super) fn replacements(token: &str) -> Vec<String> {
    let swap: &[(&str, &[&str])] = &[
        ("+", &["-"]),
        ("-", &["+"]),
        ("*", &["/"]),
        ("/", &["*"]),
        ("%", &["/"]),
        ("<", &["<="]),
        ("<=", &["<"]),
        (">", &[">="]),
        (">=", &[">"]),
        ("==", &["!="]),
        ("!=", &["=="]),
        ("&&", &["||"]),
        ("||", &["&&"]),
        ("&", &["|"]),
        ("|", &["&"]),
        ("^", &["|"]),
        ("<<", &[">>"]),
        (">>", &["<<"]),
        ("+=", &["-="]),
        ("-=", &["+="]),
        ("++", &["--"]),
        ("continue", &["break"]),
        ("0.0f", &["1.0f"]),
    ];
    if let Some((_, to)) = swap.iter().find(|(from, _)| *from == token) {
        return to.iter().map(|s| s.to_string()).collect();
    }
    integer_neighbours(token)
}

pub(super) fn integer_neighbours(token: &str) -> Vec<String> {
    let digits = token.trim_end_matches(['u', 'U', 'l', 'L']);
    let suffix = &token[digits.len()..];
    let (value, hex) = if let Some(hex) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        match u64::from_str_radix(hex, 16) {
            Ok(v) => (v, true),
            Err(_) => return Vec::new(),
        }
    } else {
        match digits.parse::<u64>() {
            Ok(v) => (v, false),
            Err(_) => return Vec::new(),
        }
    };
    let render = |v: u64| if hex { format!("0x{v:X}{suffix}") } else { format!("{v}{suffix}") };
    let mut out = vec![render(value + 1)];
    if value > 0 {
        out.push(render(value - 1));
    }
    out
}

/// The tokens of C++ source outside comments, literals and preprocessor lines, as
/// (byte start, byte end, line).
pub(super) fn tokens(source: &str) -> Vec<(usize, usize, usize)> {
    let bytes = source.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line, mut line_start) = (0, 1, true);
    const OPERATORS: [&str; 24] = [
        "<<=", ">>=", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "++", "--", "+=", "-=", "*=", "/=", "&=", "|=",
        "^=", "->", "::", "+", "-", "*",
    ];
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\n' {
            line += 1;
            line_start = true;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if line_start && c == b'#' {
            // A preprocessor line and its continuations.
            while i < bytes.len() && !(bytes[i] == b'\n' && bytes[i - 1] != b'\\') {
                if bytes[i] == b'\n' {
                    line += 1;
                }
                i += 1;
            }
            continue;
        }
        line_start = false;
        if source[i..].starts_with("//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if source[i..].starts_with("/*") {
            let end = source[i + 2..].find("*/").map_or(bytes.len(), |e| i + 2 + e + 2);
            line += source[i..end].matches('\n').count();
            i = end;
            continue;
        }
        if c == b'"' || c == b'\'' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != c {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            i = j + 1;
            continue;
        }
        let start = i;
        if c.is_ascii_alphanumeric() || c == b'_' || (c == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            // Identifiers and numbers (hex floats with p exponents and suffixes included).
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric()
                    || bytes[i] == b'_'
                    || bytes[i] == b'.'
                    || ((bytes[i] == b'+' || bytes[i] == b'-')
                        && matches!(bytes[i - 1], b'p' | b'P' | b'e' | b'E')
                        && bytes[start].is_ascii_digit()))
            {
                i += 1;
            }
        } else if let Some(op) = OPERATORS.iter().find(|op| source[i..].starts_with(*op)) {
            i += op.len();
        } else {
            i += 1;
        }
        out.push((start, i, line));
    }
    out
}

pub(super) fn mutants_of(file: &Path) -> Result<Vec<Mutant>, String> {
    let source = std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let mut mutants = Vec::new();
    let places = tokens(&source).into_iter().map(|place| (place, replacements as fn(&str) -> Vec<String>));
    let asm_places =
        asm_operands(&source).into_iter().map(|place| (place, asm_replacements as fn(&str) -> Vec<String>));
    for ((start, end, line), replace) in places.chain(asm_places) {
        let original = &source[start..end];
        for replacement in replace(original) {
            mutants.push(Mutant {
                file: file.to_path_buf(),
                line,
                start,
                end,
                original: original.to_string(),
                replacement,
                key: String::new(),
            });
        }
    }
    assign_keys(&source, &mut mutants);
    Ok(mutants)
}

/// Gives each mutant its [`Mutant::key`]: the change, its place among equal tokens of its line,
/// and the folded text of its line and up to two on each side within its paragraph, hashed
/// (FNV-1a, 64 bits).
fn assign_keys(source: &str, mutants: &mut [Mutant]) {
    let lines: Vec<String> = source.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
    let line_starts: Vec<usize> = std::iter::once(0).chain(source.match_indices('\n').map(|(i, _)| i + 1)).collect();
    let mut seen: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    for mutant in mutants.iter_mut() {
        let index = mutant.line.saturating_sub(1);
        // The window stops at blank lines: code moves a paragraph (a function, a struct) at a
        // time, so a key computed inside one survives the move.
        let first =
            (index.saturating_sub(2)..index).rev().take_while(|&i| !lines[i].is_empty()).last().unwrap_or(index);
        let last =
            (index + 1..(index + 3).min(lines.len())).take_while(|&i| !lines[i].is_empty()).last().unwrap_or(index);
        let context = lines[first..=last].join("\n");
        // Which occurrence of this token on its line (a line may hold `+` twice).
        let line_start = line_starts.get(index).copied().unwrap_or(0);
        let before = &source[line_start..mutant.start];
        let occurrence = before.matches(mutant.original.as_str()).count();
        let text = format!("{context}\u{1}{occurrence}\u{1}{}\u{1}{}", mutant.original, mutant.replacement);
        let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        let repeat = seen.entry(hash).or_default();
        mutant.key = if *repeat == 0 { format!("{hash:016x}") } else { format!("{hash:016x}#{repeat}") };
        *repeat += 1;
    }
}

/// The modifiers of an inline-PTX template the pass swaps for a neighbour: rounding, the packed
/// half type, the mma's operand order.
const ASM_MODIFIERS: [(&str, &str); 4] =
    [(".rn", ".rz"), (".f16x2", ".bf16x2"), (".bf16x2", ".f16x2"), (".row.col", ".col.row")];

/// The operands (`%N`) and swappable modifiers inside the inline-PTX templates of `source` (the
/// string literals with a `%` and a digit, outside comments and preprocessor lines), as (byte
/// start, byte end, line). They follow the C++ tokens' mutants, so adding them keeps those
/// numbers.
pub(super) fn asm_operands(source: &str) -> Vec<(usize, usize, usize)> {
    let bytes = source.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line, mut line_start) = (0, 1, true);
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\n' {
            line += 1;
            line_start = true;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if line_start && c == b'#' || source[i..].starts_with("//") {
            while i < bytes.len() && !(bytes[i] == b'\n' && bytes[i - 1] != b'\\') {
                i += 1;
            }
            continue;
        }
        line_start = false;
        if source[i..].starts_with("/*") {
            let end = source[i + 2..].find("*/").map_or(bytes.len(), |e| i + 2 + e + 2);
            line += source[i..end].matches('\n').count();
            i = end;
            continue;
        }
        if c == b'\'' {
            i += 2;
            while i < bytes.len() && bytes[i - 1] != b'\'' {
                i += 1;
            }
            continue;
        }
        if c != b'"' {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < bytes.len() && bytes[j] != b'"' {
            j += if bytes[j] == b'\\' { 2 } else { 1 };
        }
        let literal = &source[i + 1..j.min(bytes.len())];
        if literal.as_bytes().windows(2).any(|w| w[0] == b'%' && w[1].is_ascii_digit()) {
            let base = i + 1;
            let mut k = 0;
            while k < literal.len() {
                let rest = &literal[k..];
                if rest.starts_with('%') && rest[1..].starts_with(|c: char| c.is_ascii_digit()) {
                    let digits = rest[1..].bytes().take_while(u8::is_ascii_digit).count();
                    out.push((base + k, base + k + 1 + digits, line));
                    k += 1 + digits;
                } else if let Some((from, _)) = ASM_MODIFIERS.iter().find(|(from, _)| {
                    rest.starts_with(from) && !rest[from.len()..].starts_with(|c: char| c.is_ascii_alphanumeric())
                }) {
                    out.push((base + k, base + k + from.len(), line));
                    k += from.len();
                } else {
                    k += rest.chars().next().map_or(1, char::len_utf8);
                }
            }
        }
        i = j + 1;
    }
    out
}

/// `%N` to `%(N+1)` and `%(N-1)`; a modifier to its neighbour.
pub(super) fn asm_replacements(token: &str) -> Vec<String> {
    if let Some(number) = token.strip_prefix('%').and_then(|n| n.parse::<u32>().ok()) {
        let mut out = vec![format!("%{}", number + 1)];
        if number > 0 {
            out.push(format!("%{}", number - 1));
        }
        return out;
    }
    ASM_MODIFIERS.iter().filter(|(from, _)| *from == token).map(|(_, to)| to.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_skip_comments_literals_and_preprocessor_lines() {
        let source = "#define A(x) \\\n  x + 1\n// a + b\nint f() { return a+b /* c - d */ + 0x1p126f; } \"x+y\"\n";
        let found: Vec<&str> = tokens(source).iter().map(|&(s, e, _)| &source[s..e]).collect();
        assert_eq!(found, ["int", "f", "(", ")", "{", "return", "a", "+", "b", "+", "0x1p126f", ";", "}"]);
        assert_eq!(tokens(source)[7].2, 4, "line numbers count the skipped lines");
    }

    #[test]
    fn asm_operands_and_modifiers_are_found_inside_templates_only() {
        let source = "// asm(\"mul.rn.f16x2 %0, %1;\")\nx = a % 2;\nasm(\"{ mul.rn.f16x2 %0, %1, %12; }\"\n    \"mma.sync.row.col.bf16x2 %3;\" : \"=r\"(d));\n";
        let found: Vec<(&str, usize)> = asm_operands(source).iter().map(|&(s, e, l)| (&source[s..e], l)).collect();
        assert_eq!(
            found,
            [(".rn", 3), (".f16x2", 3), ("%0", 3), ("%1", 3), ("%12", 3), (".row.col", 4), (".bf16x2", 4), ("%3", 4)]
        );
        assert_eq!(asm_replacements("%0"), ["%1"]);
        assert_eq!(asm_replacements("%12"), ["%13", "%11"]);
        assert_eq!(asm_replacements(".rn"), [".rz"]);
        assert_eq!(asm_replacements(".bf16x2"), [".f16x2"]);
    }

    #[test]
    fn keys_follow_code_that_moves_and_tell_repeats_apart() {
        let dir = std::env::temp_dir().join(format!("gemv-mutant-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let body = "int f(int a) {\n    return a + 1;\n}\n";
        let (first, second) = (dir.join("a.cu"), dir.join("b.cu"));
        std::fs::write(&first, format!("// one file\n{body}int g(int b) {{ return b - 2; }}\n")).expect("write");
        // The same function moved to another file, lower down, with other code around it.
        std::fs::write(&second, format!("// another\n// file\nint h();\n\n\n{body}")).expect("write");
        let keys = |file: &Path| -> Vec<(String, String, String)> {
            mutants_of(file).expect("mutants").into_iter().map(|m| (m.original, m.replacement, m.key)).collect()
        };
        let (a, b) = (keys(&first), keys(&second));
        let moved = |original: &str, replacement: &str, list: &[(String, String, String)]| {
            list.iter().find(|(o, r, _)| o == original && r == replacement).map(|(_, _, k)| k.clone())
        };
        assert!(moved("+", "-", &a).is_some());
        // The same paragraph (blank lines around it) in another file at another line keeps its keys.
        let window = "x\ny\nint f(int a) {\n    return a + 1;\n}\nz\nw\n";
        std::fs::write(&first, format!("// top\n{window}")).expect("write");
        std::fs::write(&second, format!("int other;\n\n\n\n{window}// end\n")).expect("write");
        let (a, b2) = (keys(&first), keys(&second));
        assert_eq!(moved("+", "-", &a), moved("+", "-", &b2), "the same change in the same text keeps its key");
        assert_ne!(moved("+", "-", &a), moved("+", "-", &b), "other surroundings, another key");
        // Two identical lines: their mutants' keys differ by the repeat suffix.
        std::fs::write(&first, "a = b + c;\na = b + c;\na = b + c;\n").expect("write");
        let all = keys(&first);
        let plus: Vec<&String> = all.iter().filter(|(o, _, _)| o == "+").map(|(_, _, k)| k).collect();
        assert_eq!(plus.len(), 3);
        assert!(plus[0] != plus[1] && plus[1] != plus[2] && plus[0] != plus[2], "{plus:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn integers_move_by_one_and_operators_swap() {
        assert_eq!(replacements("64"), ["65", "63"]);
        assert_eq!(replacements("0"), ["1"]);
        assert_eq!(replacements("0x7Fu"), ["0x80u", "0x7Eu"]);
        assert_eq!(replacements("0x7F"), ["0x80", "0x7E"]);
        assert_eq!(replacements("<"), ["<="]);
        assert_eq!(replacements("0x1p126f"), Vec::<String>::new());
        assert_eq!(replacements("continue"), ["break"]);
    }
}
