//! The emulator build's view of inline PTX: each `asm(...)` statement of a kernel source becomes
//! a call into the emulator's PTX executor, carrying the statement's template, its constraints and
//! its C++ bindings exactly as written, so the emulator runs the text the GPU runs.
//!
//! The statement is read as the CUDA front end reads GNU extended asm: `asm` (or `__asm__`), an
//! optional `volatile`, then in parentheses the template (adjacent string literals), and after
//! colons the outputs, the inputs and the clobbers; each operand is a constraint literal and a
//! parenthesised C++ expression. Comments, string and character literals elsewhere are skipped,
//! so a word `asm` inside them is left alone. The replacement keeps the statement's line count,
//! so the compiler's line numbers (and the executor's messages) point at the source.

/// One inline-PTX statement found in a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsmStatement {
    /// 1-based line of the `asm` keyword.
    pub line: usize,
    /// The template's string literals as written (quotes and escapes included), space-separated.
    pub template: String,
    /// Each operand's constraint, outputs first (as written, without quotes).
    pub constraints: Vec<String>,
    /// Each operand's C++ expression, in the same order.
    pub bindings: Vec<String>,
    /// How many of the operands are outputs.
    pub outputs: usize,
}

/// A source with its asm statements replaced, and the statements found.
#[derive(Debug)]
pub struct Rewritten {
    /// The source, each `asm(...)` replaced by a `do { ... } while (0)` calling the executor.
    pub text: String,
    /// The statements, in source order.
    pub statements: Vec<AsmStatement>,
}

/// Replaces every asm statement of `source` (the file called `file`, for messages).
pub fn rewrite(source: &str, file: &str) -> Result<Rewritten, String> {
    let bytes = source.as_bytes();
    let mut text = String::with_capacity(source.len() * 2);
    let mut statements = Vec::new();
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => i = skip_line_comment(bytes, i),
            b'/' if bytes.get(i + 1) == Some(&b'*') => i = skip_block_comment(bytes, i, file)?,
            b'"' | b'\'' => i = skip_literal(bytes, i, file)?,
            c if is_ident_start(c) => {
                let end = ident_end(bytes, i);
                let word = &source[i..end];
                let preceded_by_ident = i > 0 && is_ident_char(bytes[i - 1]);
                if !preceded_by_ident && matches!(word, "asm" | "__asm__" | "__asm") {
                    let line = 1 + source[..i].bytes().filter(|&b| b == b'\n').count();
                    let (statement, stop) = parse_statement(source, end, line, file)?;
                    text.push_str(&source[copied..i]);
                    text.push_str(&executor_call(&statement, file));
                    let newlines = source[i..stop].bytes().filter(|&b| b == b'\n').count();
                    text.extend(std::iter::repeat_n('\n', newlines));
                    statements.push(statement);
                    copied = stop;
                    i = stop;
                } else {
                    i = end;
                }
            }
            _ => i += 1,
        }
    }
    text.push_str(&source[copied..]);
    Ok(Rewritten { text, statements })
}

/// The C++ that executes `statement` under the emulator (one line; the caller restores the count).
fn executor_call(statement: &AsmStatement, file: &str) -> String {
    let constraints = statement.constraints.join(",");
    let operands: Vec<String> = statement
        .constraints
        .iter()
        .zip(&statement.bindings)
        .enumerate()
        .map(|(index, (constraint, binding))| {
            let kind = if index >= statement.outputs {
                "input"
            } else if constraint.contains('+') {
                "inout"
            } else {
                "output"
            };
            format!("::emu::ptx::{kind}({binding})")
        })
        .chain(std::iter::once("::emu::ptx::Operand{}".to_string()))
        .collect();
    format!(
        "do {{ static const ::emu::ptx::Statement emu_asm_statement(\"{file}\", {line}, {template}, \"{constraints}\", \
         {outputs}); ::emu::ptx::Operand emu_asm_operands[] = {{{operands}}}; \
         emu_asm_statement.execute(emu_asm_operands, {count}); }} while (0)",
        line = statement.line,
        template = statement.template,
        outputs = statement.outputs,
        operands = operands.join(", "),
        count = statement.constraints.len(),
    )
}

/// Parses from just after the `asm` keyword; returns the statement and the index just past its `)`.
fn parse_statement(source: &str, mut i: usize, line: usize, file: &str) -> Result<(AsmStatement, usize), String> {
    let bytes = source.as_bytes();
    let at = |what: &str| format!("{file}:{line}: asm statement: {what}");
    i = skip_space(bytes, i, file)?;
    for qualifier in ["volatile", "__volatile__", "__volatile"] {
        if source[i..].starts_with(qualifier) && !bytes.get(i + qualifier.len()).is_some_and(|&c| is_ident_char(c)) {
            i = skip_space(bytes, i + qualifier.len(), file)?;
        }
    }
    if bytes.get(i) != Some(&b'(') {
        return Err(at("expected `(` after `asm`"));
    }
    i = skip_space(bytes, i + 1, file)?;
    let mut literals = Vec::new();
    while bytes.get(i) == Some(&b'"') {
        let end = skip_literal(bytes, i, file)?;
        literals.push(&source[i..end]);
        i = skip_space(bytes, end, file)?;
    }
    if literals.is_empty() {
        return Err(at("the template is not a string literal"));
    }
    let mut constraints = Vec::new();
    let mut bindings = Vec::new();
    let mut outputs = 0;
    let mut section = 0;
    while bytes.get(i) == Some(&b':') {
        section += 1;
        i = skip_space(bytes, i + 1, file)?;
        // An empty section, or `::` read as two colons.
        while bytes.get(i) == Some(&b'"') {
            let end = skip_literal(bytes, i, file)?;
            let constraint = source[i + 1..end - 1].to_string();
            i = skip_space(bytes, end, file)?;
            if section <= 2 {
                if bytes.get(i) != Some(&b'(') {
                    return Err(at(&format!("operand \"{constraint}\" has no `(expression)`")));
                }
                let close = matching_paren(bytes, i, file).map_err(|e| at(&e))?;
                bindings.push(source[i + 1..close].trim().to_string());
                constraints.push(constraint);
                if section == 1 {
                    outputs += 1;
                }
                i = skip_space(bytes, close + 1, file)?;
            } else if section > 3 {
                return Err(at("goto labels are not supported"));
            }
            if bytes.get(i) == Some(&b',') {
                i = skip_space(bytes, i + 1, file)?;
            }
        }
    }
    if bytes.get(i) != Some(&b')') {
        return Err(at("expected `)` closing the statement"));
    }
    let statement = AsmStatement { line, template: literals.join(" "), constraints, bindings, outputs };
    Ok((statement, i + 1))
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn ident_end(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && is_ident_char(bytes[i]) {
        i += 1;
    }
    i
}

fn skip_line_comment(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && bytes[i] != b'\n' {
        i += 1;
    }
    i
}

fn skip_block_comment(bytes: &[u8], i: usize, file: &str) -> Result<usize, String> {
    bytes[i + 2..]
        .windows(2)
        .position(|w| w == b"*/")
        .map(|p| i + 2 + p + 2)
        .ok_or_else(|| format!("{file}: unterminated comment"))
}

/// Index just past the string or character literal starting at `i`.
fn skip_literal(bytes: &[u8], i: usize, file: &str) -> Result<usize, String> {
    let quote = bytes[i];
    let mut j = i + 1;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 2,
            c if c == quote => return Ok(j + 1),
            b'\n' => break,
            _ => j += 1,
        }
    }
    Err(format!("{file}: unterminated literal"))
}

/// Skips white space and comments.
fn skip_space(bytes: &[u8], mut i: usize, file: &str) -> Result<usize, String> {
    loop {
        match bytes.get(i) {
            Some(c) if c.is_ascii_whitespace() => i += 1,
            Some(b'/') if bytes.get(i + 1) == Some(&b'/') => i = skip_line_comment(bytes, i),
            Some(b'/') if bytes.get(i + 1) == Some(&b'*') => i = skip_block_comment(bytes, i, file)?,
            _ => return Ok(i),
        }
    }
}

/// The index of the `)` matching the `(` at `open`.
fn matching_paren(bytes: &[u8], open: usize, file: &str) -> Result<usize, String> {
    let mut depth = 0usize;
    let mut i = open;
    while i < bytes.len() {
        match bytes[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return if bytes[i] == b')' { Ok(i) } else { Err("unbalanced brackets in an operand".into()) };
                }
            }
            b'"' | b'\'' => {
                i = skip_literal(bytes, i, file)?;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    Err("an operand's expression is not closed".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_becomes_an_executor_call_with_its_operands_in_order() {
        let source =
            "x = 1;\nasm(\"prmt.b32 %0, %1, %2, %3;\" : \"=r\"(d) : \"r\"(a), \"r\"(f(b, c)), \"r\"(0x10u));\n";
        let out = rewrite(source, "k.cuh").unwrap();
        assert_eq!(out.statements.len(), 1);
        let s = &out.statements[0];
        assert_eq!(s.line, 2);
        assert_eq!(s.template, "\"prmt.b32 %0, %1, %2, %3;\"");
        assert_eq!(s.constraints, ["=r", "r", "r", "r"]);
        assert_eq!(s.bindings, ["d", "a", "f(b, c)", "0x10u"]);
        assert_eq!(s.outputs, 1);
        assert!(out.text.starts_with("x = 1;\ndo { static const ::emu::ptx::Statement"));
        assert!(out.text.contains("::emu::ptx::output(d), ::emu::ptx::input(a), ::emu::ptx::input(f(b, c))"));
        assert!(out.text.contains("\"k.cuh\", 2, \"prmt.b32 %0, %1, %2, %3;\", \"=r,r,r,r\", 1)"));
        assert!(out.text.ends_with("while (0);\n"));
    }

    #[test]
    fn multi_line_statements_keep_the_line_count_and_join_their_literals() {
        let source = "asm volatile(\"a %0,\"\n    \" %1;\"\n    : \"+f\"(acc[i])\n    : \"l\"(p) : \"memory\");\nnext;";
        let out = rewrite(source, "k.cu").unwrap();
        assert_eq!(out.text.lines().count(), source.lines().count());
        assert!(out.text.ends_with("\nnext;"));
        let s = &out.statements[0];
        assert_eq!(s.template, "\"a %0,\" \" %1;\"");
        assert_eq!(s.constraints, ["+f", "l"]);
        assert!(out.text.contains("::emu::ptx::inout(acc[i]), ::emu::ptx::input(p)"));
    }

    #[test]
    fn asm_in_comments_strings_and_longer_names_is_left_alone() {
        let source =
            "// asm(\"x\");\n/* asm(\"y\"); */ const char* s = \"asm(\\\"z\\\")\"; int my_asm(int); gemv_asm(1);";
        let out = rewrite(source, "k.cu").unwrap();
        assert!(out.statements.is_empty());
        assert_eq!(out.text, source);
    }

    #[test]
    fn input_only_statements_and_empty_output_sections_parse() {
        let out = rewrite("asm volatile(\"prefetch.global.L2 [%0];\" ::\"l\"(p));", "k.cuh").unwrap();
        let s = &out.statements[0];
        assert_eq!((s.outputs, s.constraints.clone()), (0, vec!["l".to_string()]));
        assert!(out.text.contains("::emu::ptx::input(p), ::emu::ptx::Operand{}"));
    }

    #[test]
    fn malformed_statements_are_errors_naming_the_line() {
        let error = rewrite("\n\nasm(\"x %0;\" : \"=r\" d);", "k.cu").unwrap_err();
        assert!(error.starts_with("k.cu:3: asm statement"), "{error}");
        assert!(rewrite("asm(x);", "k.cu").unwrap_err().contains("template"));
        assert!(rewrite("asm(\"x\" : \"=r\"(d)", "k.cu").is_err());
    }
}
