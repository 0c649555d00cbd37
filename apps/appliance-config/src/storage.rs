//! storage: the local storage part's words. `ns=ITEM[,ITEM...]` with ITEM `nvme<C>n<NSID>`
//! (controller C in PCI order, namespace NSID), `ram:<MiB>` or `null:<MiB>`; without `ns=` the
//! image serves every NVMe namespace it finds. `nvme.selftest=TEST[,TEST...]`: the NVMe
//! self-tests the QEMU suites run (what each does: the image's `storage` module).

use alloc::vec::Vec;
use blockdev::NsSpec;

/// One self-test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    Pattern(u64),
    Write(u64),
    Verify(u64),
    Bad,
    Bench,
    /// Write Zeroes, Dataset Management (deallocate) and Flush, where ONCS says so.
    Ops,
    /// Single-command transfers of up to 4 MiB, aligned and unaligned buffers.
    Big(u64),
    /// Normal shutdown of every controller (CC.SHN, wait CSTS.SHST); put it last: the
    /// controllers take no commands afterwards.
    Shutdown,
}

/// The storage part of the configuration.
#[derive(Debug, Clone, Default)]
pub struct StorageConfig {
    pub ns: Vec<NsSpec>,
    pub tests: Vec<Test>,
}

fn num(s: &str) -> Option<u64> {
    kernel::cmdline::parse_u64(s)
}

/// Setter for `ns=`.
pub fn parse_ns(c: &mut StorageConfig, v: &str) -> Result<(), &'static str> {
    const WHY: &str = "expected a comma list of nvme<C>n<NSID>, ram:<MiB>, null:<MiB>";
    c.ns.clear();
    for item in v.split(',') {
        let spec = if let Some(m) = item.strip_prefix("ram:") {
            NsSpec::Ram { bytes: num(m).filter(|m| (1..=1 << 20).contains(m)).ok_or(WHY)? << 20, block_size: 512 }
        } else if let Some(m) = item.strip_prefix("null:") {
            NsSpec::Null { bytes: num(m).filter(|m| (1..=1 << 30).contains(m)).ok_or(WHY)? << 20, block_size: 512 }
        } else if let Some(rest) = item.strip_prefix("nvme") {
            let (c, n) = rest.split_once('n').ok_or(WHY)?;
            let ctrl = num(c).ok_or(WHY)? as usize;
            let nsid = num(n).filter(|n| (1..0xFFFF_FFFF).contains(n)).ok_or(WHY)? as u32;
            NsSpec::Nvme { ctrl: Some(ctrl), nsid }
        } else {
            return Err(WHY);
        };
        c.ns.push(spec);
    }
    Ok(())
}

/// Setter for `nvme.selftest=`.
pub fn parse_tests(c: &mut StorageConfig, v: &str) -> Result<(), &'static str> {
    const WHY: &str = "expected a comma list of pattern:<seed>, write:<seed>, verify:<seed>, big:<seed>, bad, bench, ops, shutdown";
    c.tests.clear();
    for item in v.split(',') {
        let (name, arg) = item.split_once(':').unwrap_or((item, ""));
        let seed = || num(arg).ok_or(WHY);
        c.tests.push(match name {
            "pattern" => Test::Pattern(seed()?),
            "write" => Test::Write(seed()?),
            "verify" => Test::Verify(seed()?),
            "big" => Test::Big(seed()?),
            "bad" if arg.is_empty() => Test::Bad,
            "bench" if arg.is_empty() => Test::Bench,
            "ops" if arg.is_empty() => Test::Ops,
            "shutdown" if arg.is_empty() => Test::Shutdown,
            _ => return Err(WHY),
        });
    }
    Ok(())
}
