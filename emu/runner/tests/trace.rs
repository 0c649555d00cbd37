//! `--trace`: the driver's firmware command trace, as emu-runner prints it, over a whole
//! bring-up and shutdown: one `mlx5_cmd:` line per command posted, in the tracepoint shape, and
//! in full mode the input and output hex rows of each.
use std::sync::Mutex;

use emu_connectx::SimClock;
use emu_runner::{Node, Options};

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;
impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        let s = r.args().to_string();
        if s.starts_with("mlx5_cmd: ") {
            LINES.lock().unwrap().push(s);
        }
    }
    fn flush(&self) {}
}
static CAPTURE: Capture = Capture;

fn node(mode: mlx5::TraceMode) -> (Node, Vec<String>) {
    let _ = log::set_logger(&CAPTURE).map(|_| log::set_max_level(log::LevelFilter::Info));
    LINES.lock().unwrap().clear();
    let (a, _b) = emu_roce::MemLink::pair(Default::default(), 1);
    let n = Node::with_options(SimClock::new(), [10, 0, 0, 1], [2, 0, 0, 0, 0, 1], 0x1_0000_0000, Box::new(a), Options { trace: mode, ..Default::default() })
        .expect("bring-up");
    let lines = std::mem::take(&mut *LINES.lock().unwrap());
    (n, lines)
}

/// The command slot a line names: 0 for every command, 31 (the last, reserved) for MANAGE_PAGES.
fn slot_of(l: &str) -> Option<(u32, &str)> {
    let rest = l.strip_prefix("mlx5_cmd: cmd[")?;
    let (slot, rest) = rest.split_once("]: ")?;
    let slot = slot.parse::<u32>().ok()?;
    let dump_row = rest.split_once(": ").is_some_and(|(o, _)| !o.is_empty() && o.chars().all(|c| c.is_ascii_hexdigit()));
    let page_cmd = rest.contains("MANAGE_PAGES(0x108)") || dump_row;
    (slot == 0 || (slot == 31 && page_cmd)).then_some((slot, rest))
}

/// `cmd[N]: NAME(0xOP) op_mod(0xM) ok, status OK(0x0), syndrome (0x0), ilen I, olen O`
fn summary_ok(l: &str) -> bool {
    let Some((_, rest)) = slot_of(l) else { return false };
    let Some((name, rest)) = rest.split_once("(0x") else { return false };
    let Some((op, rest)) = rest.split_once(") op_mod(0x") else { return false };
    let Some((op_mod, rest)) = rest.split_once(") ok, status OK(0x0), syndrome (0x0), ilen ") else { return false };
    let Some((ilen, olen)) = rest.split_once(", olen ") else { return false };
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        && u16::from_str_radix(op, 16).is_ok()
        && u16::from_str_radix(op_mod, 16).is_ok()
        && ilen.parse::<usize>().is_ok_and(|n| n >= 16)
        && olen.parse::<usize>().is_ok_and(|n| n >= 16)
}

// One test function: the logger and its capture are process-wide.
#[test]
fn trace_lines_per_command_then_full_dumps() {
    let (n, lines) = node(mlx5::TraceMode::Commands);
    let commands = n.v.stats().commands as usize;
    assert!(commands > 20, "{commands}");
    assert_eq!(lines.len(), commands, "one line per command: {lines:#?}");
    for l in &lines {
        assert!(summary_ok(l), "bad trace line {l:?}");
    }
    assert!(lines[0].starts_with("mlx5_cmd: cmd[0]: ENABLE_HCA(0x104) op_mod(0x0) ok"), "{}", lines[0]);
    assert!(lines.iter().any(|l| l.contains("QUERY_HCA_CAP(0x100) op_mod(0x1) ok") && l.ends_with("ilen 16, olen 4112")));
    assert!(lines.iter().any(|l| l.starts_with("mlx5_cmd: cmd[0]: INIT_HCA(0x102)")));
    drop(n);

    let (n, lines) = node(mlx5::TraceMode::Full);
    let commands = n.v.stats().commands as usize;
    let summaries = lines.iter().filter(|l| summary_ok(l)).count();
    assert_eq!(summaries, commands);
    let dump = |l: &&String| slot_of(l).is_some_and(|(_, r)| r.starts_with("dump command data "));
    let inputs = lines.iter().filter(|l| dump(l) && l.ends_with(" INPUT")).count();
    let outputs = lines.iter().filter(|l| dump(l) && l.ends_with(" OUTPUT")).count();
    assert!(lines.iter().any(|l| l.starts_with("mlx5_cmd: cmd[31]: MANAGE_PAGES(0x108)")), "page commands on the reserved slot");
    assert_eq!((inputs, outputs), (commands, commands));
    // ENABLE_HCA: input dump (opcode 0x104 in the first dword), then the line, then the output.
    assert_eq!(lines[0], "mlx5_cmd: cmd[0]: dump command data ENABLE_HCA(0x104) INPUT");
    assert_eq!(lines[1], "mlx5_cmd: cmd[0]: 000: 01040000 00000000 00000000 00000000");
    assert!(summary_ok(&lines[2]));
    assert_eq!(lines[3], "mlx5_cmd: cmd[0]: dump command data ENABLE_HCA(0x104) OUTPUT");
    // A 4112-byte QUERY_HCA_CAP output dumps as 257 rows, offsets 000..1000.
    let at = lines.iter().position(|l| l == "mlx5_cmd: cmd[0]: dump command data QUERY_HCA_CAP(0x100) OUTPUT").expect("cap dump");
    let rows: Vec<&String> = lines[at + 1..].iter().take_while(|l| !l.contains("dump command data") && !summary_ok(l)).collect();
    assert_eq!(rows.len(), 4112 / 16);
    assert!(rows[256].starts_with("mlx5_cmd: cmd[0]: 1000: "), "{}", rows[256]);
    for (i, r) in rows.iter().enumerate() {
        let words: Vec<&str> = r.rsplit_once(": ").unwrap().1.split(' ').collect();
        assert_eq!(words.len(), 4, "{r}");
        assert!(words.iter().all(|w| w.len() == 8 && u32::from_str_radix(w, 16).is_ok()), "{r}");
        assert!(r.starts_with(&format!("mlx5_cmd: cmd[0]: {:03x}: ", i * 16)), "{r}");
    }
}
