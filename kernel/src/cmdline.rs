//! Kernel command-line parser: whitespace-separated `name=value` (or bare `name`) options,
//! applied to a typed configuration through a table of [`Opt`] entries.
//!
//! The rule (documented in README): an unknown name or a malformed value is an error that
//! names the option; the image prints it and stops with a failure status. Nothing is
//! silently ignored. A part adds an option by adding one table entry (name, help, setter).
use core::fmt;

/// One option: its exact name, a help line, and a setter that checks the value.
pub struct Opt<C> {
    pub name: &'static str,
    pub help: &'static str,
    pub set: fn(&mut C, &str) -> Result<(), &'static str>,
}

/// A rejected option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmdlineError<'a> {
    /// No table entry has this name.
    Unknown { name: &'a str },
    /// The setter rejected the value; `why` says what it expects.
    Malformed { name: &'a str, value: &'a str, why: &'static str },
}

impl fmt::Display for CmdlineError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown { name } => write!(f, "unknown command-line option `{name}`"),
            Self::Malformed { name, value, why } => {
                write!(f, "command-line option `{name}`: bad value `{value}` ({why})")
            }
        }
    }
}

/// Apply every option of `line` to `cfg`, stopping at the first error.
pub fn parse<'a, C>(line: &'a str, table: &[Opt<C>], cfg: &mut C) -> Result<(), CmdlineError<'a>> {
    for tok in line.split_whitespace() {
        let (name, value) = tok.split_once('=').unwrap_or((tok, ""));
        let opt = table.iter().find(|o| o.name == name).ok_or(CmdlineError::Unknown { name })?;
        (opt.set)(cfg, value).map_err(|why| CmdlineError::Malformed { name, value, why })?;
    }
    Ok(())
}

/// Parse a decimal or `0x` hexadecimal unsigned number.
pub fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default, Debug, PartialEq)]
    struct Cfg {
        verbose: bool,
        n: u64,
        names: Vec<String>,
    }

    const TABLE: &[Opt<Cfg>] = &[
        Opt {
            name: "verbose",
            help: "more output",
            set: |c, v| {
                if v.is_empty() {
                    c.verbose = true;
                    Ok(())
                } else {
                    Err("takes no value")
                }
            },
        },
        Opt {
            name: "n",
            help: "a number",
            set: |c, v| {
                c.n = parse_u64(v).ok_or("expected a number")?;
                Ok(())
            },
        },
        Opt {
            name: "nvmf.name",
            help: "repeatable",
            set: |c, v| {
                c.names.push(v.to_string());
                Ok(())
            },
        },
    ];

    #[test]
    fn parses_known_options() {
        let mut c = Cfg::default();
        parse("  verbose n=0x10 nvmf.name=a nvmf.name=b ", TABLE, &mut c).unwrap();
        assert_eq!(c, Cfg { verbose: true, n: 16, names: vec!["a".into(), "b".into()] });
    }

    #[test]
    fn empty_line_is_fine() {
        let mut c = Cfg::default();
        parse("", TABLE, &mut c).unwrap();
        assert_eq!(c, Cfg::default());
    }

    #[test]
    fn unknown_option_is_named() {
        let mut c = Cfg::default();
        let e = parse("n=1 bogus=3", TABLE, &mut c).unwrap_err();
        assert_eq!(e, CmdlineError::Unknown { name: "bogus" });
        assert_eq!(e.to_string(), "unknown command-line option `bogus`");
    }

    #[test]
    fn malformed_value_is_named() {
        let mut c = Cfg::default();
        let e = parse("n=12x", TABLE, &mut c).unwrap_err();
        assert_eq!(e, CmdlineError::Malformed { name: "n", value: "12x", why: "expected a number" });
        assert!(e.to_string().contains("`n`"));
        let e = parse("verbose=yes", TABLE, &mut c).unwrap_err();
        assert!(matches!(e, CmdlineError::Malformed { name: "verbose", .. }));
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u64("42"), Some(42));
        assert_eq!(parse_u64("0xff"), Some(255));
        assert_eq!(parse_u64("0x"), None);
        assert_eq!(parse_u64("-1"), None);
    }
}
