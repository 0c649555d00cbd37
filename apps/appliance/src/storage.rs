//! appliance storage: finds the NVMe controllers, lists them and their namespaces, builds
//! the namespaces the command line asks for (`ns=`), and runs the NVMe self-tests
//! (`nvme.selftest=`) the QEMU suites use.
//!
//! `ns=ITEM[,ITEM...]` with ITEM `nvme<C>n<NSID>` (controller C in PCI order, namespace
//! NSID), `ram:<MiB>` or `null:<MiB>`. Without `ns=`, every NVMe namespace found is served.
//! `nvme.selftest=TEST[,TEST...]` with TEST `pattern:<seed>` (write a pattern over each
//! served NVMe namespace with mixed I/O sizes, read back, verify), `write:<seed>`,
//! `verify:<seed>` (the two halves, for a check across boots), `bad` (requests that must be
//! refused), `bench` (QD1 / QD32 4 KiB random reads), `ops` (Write Zeroes, deallocate, Flush),
//! `big:<seed>` (single-command writes and reads of up to 4 MiB, aligned and unaligned
//! buffers: exercises chained PRP lists), `shutdown` (normal shutdown of every controller; last).
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use blockdev::{BlockDevice, BlockDone, BlockError, BlockIo, BlockOp};
use hal::{DmaRegion, DmaSlice, Hal};
use kernel::{KernelDma, KernelHal, KernelMmio};
use log::{error, info};
use nvme::{Controller, NvmeNamespace};

pub use appliance_config::storage::{StorageConfig, Test};
pub use blockdev::NsSpec;

type Ns = NvmeNamespace<'static, KernelHal, KernelMmio>;

/// A namespace the storage part built, by name (`nvme0n1`, `ram1`, `null2`).
pub struct Served {
    pub name: String,
    pub dev: Backing,
}

/// The one block-device type of the image: a local NVMe namespace, RAM or null (the NVMe-oF
/// target serves these; enum dispatch, no allocation per I/O).
pub type Backing = blockdev::Backing<KernelHal, Ns>;

/// What [`attach`] built.
pub struct Storage {
    /// False if a self-test or a namespace the command line asked for failed.
    pub ok: bool,
    /// The namespaces served, in `ns=` order (or every NVMe namespace found).
    pub served: Vec<Served>,
    /// Every NVMe controller that came up, as (index, controller, shut down already); the
    /// image shuts them down on its way out ([`Storage::shutdown`]).
    pub controllers: Vec<(usize, &'static Controller<KernelHal, KernelMmio>, bool)>,
    /// The controllers that sit in PCIe hot-plug slots, watched for removal.
    pub slots: Vec<SlotWatch>,
}

/// An NVMe controller in a PCIe hot-plug slot ([`Storage::watch_slots`]).
pub struct SlotWatch {
    /// Index in PCI order (`nvme<i>`).
    pub ctrl: usize,
    pub slot: kernel::pcie_slot::HotplugSlot,
    /// Removed already (orderly or not): nothing more to do.
    pub removed: bool,
}

impl Storage {
    /// Poll the hot-plug slots of the NVMe controllers (a slow path; each poll is one config
    /// read per slot). An attention button press (an operator's removal request, QEMU's
    /// `device_del`) removes the controller in order: normal shutdown, its namespaces fail
    /// (the target takes them out of service and tells the hosts), then the slot's power goes
    /// off so the drive can be pulled. A card that vanished without that is marked gone.
    /// Returns how many controllers were removed by this call.
    pub fn watch_slots(&mut self) -> usize {
        let mut removed = 0;
        for w in self.slots.iter_mut().filter(|w| !w.removed) {
            let ev = w.slot.poll();
            let Some((_, c, shut)) = self.controllers.iter_mut().find(|(i, _, _)| *i == w.ctrl) else { continue };
            if ev.attention && ev.present {
                info!("storage: nvme{}: slot {} attention button: removing the controller", w.ctrl, w.slot.number);
                let r = c.remove();
                w.slot.power_off();
                info!(
                    "storage: nvme{}: removed ({}); slot {} powered off, the drive may be pulled",
                    w.ctrl,
                    if r.is_ok() { "shutdown complete" } else { "shutdown did not complete" },
                    w.slot.number
                );
            } else if ev.presence_changed && !ev.present {
                error!("storage: nvme{}: slot {} lost its card without a removal request (surprise removal)", w.ctrl, w.slot.number);
                c.gone();
            } else {
                continue;
            }
            *shut = true;
            w.removed = true;
            removed += 1;
        }
        removed
    }

    /// Normal shutdown (CC.SHN, wait CSTS.SHST) of every controller not yet shut down, so
    /// each writes its volatile cache and metadata to media before the image ends. One line
    /// per controller; returns how many failed. Call last: the controllers take no commands
    /// afterwards (the namespaces served must have no I/O outstanding).
    pub fn shutdown(&mut self) -> usize {
        let mut failed = 0;
        for (i, c, shut) in self.controllers.iter_mut() {
            if *shut {
                info!("storage: nvme{i}: already shut down (selftest)");
                continue;
            }
            *shut = true;
            match c.shutdown() {
                Ok(()) => info!("storage: nvme{i}: normal shutdown complete (CSTS.SHST=10b)"),
                Err(e) => {
                    error!("storage: nvme{i}: normal shutdown failed: {e}");
                    failed += 1;
                }
            }
        }
        failed
    }
}

/// Bring the storage up and run the configured self-tests. `ok` is false if a self-test
/// failed (the image then ends with a failure status).
pub fn attach(cfg: &StorageConfig) -> Storage {
    // Controllers by PCI order (None: did not come up); they live for the whole run.
    let mut ctrls: Vec<Option<&'static Controller<KernelHal, KernelMmio>>> = Vec::new();
    let mut nvme_ns: Vec<(usize, nvme::NamespaceInfo, nvme::queue::QueuePair<KernelDma>)> = Vec::new();
    let mut slots = Vec::new();
    for (i, f) in kernel::pci::find_class(0x01, 0x08, Some(0x02)).enumerate() {
        ctrls.push(None);
        let (b, d, fu) = f.bdf();
        let bdf = format!("{b:02x}:{d:02x}.{fu:x}");
        f.enable();
        let bar = match f.map_bar(0) {
            Ok(m) => m,
            Err(e) => {
                error!("storage: nvme{i} {bdf}: BAR0: {e:?}");
                continue;
            }
        };
        let mut c = match Controller::init(KernelHal, bar, nvme::Config::default()) {
            Ok(c) => c,
            Err(e) => {
                error!("storage: nvme{i} {bdf}: {e}");
                continue;
            }
        };
        let id = c.info().clone();
        info!(
            "storage: nvme{i} {bdf} serial \"{}\" model \"{}\" firmware \"{}\" NVMe {}.{} max transfer {} KiB (MDTS {})",
            id.serial(), id.model(), id.firmware(), c.vs.major(), c.vs.minor(), c.max_transfer_bytes() / 1024, id.mdts
        );
        let mut ids = Vec::new();
        if let Err(e) = c.active_namespaces(|n| ids.push(n)) {
            error!("storage: nvme{i}: active namespace list: {e}");
        }
        for nsid in ids {
            match c.identify_namespace(nsid) {
                Ok(ns) => {
                    info!(
                        "storage: nvme{i}n{nsid}: {} blocks x {} B = {} bytes ({} MiB), {ns}",
                        ns.blocks, ns.block_size, ns.bytes(), ns.bytes() >> 20
                    );
                    let wanted = cfg.ns.is_empty() || cfg.ns.contains(&NsSpec::Nvme { ctrl: Some(i), nsid });
                    if wanted {
                        match c.create_io_queue_pair(64) {
                            Ok(q) => nvme_ns.push((i, ns, q)),
                            Err(e) => error!("storage: nvme{i}n{nsid}: I/O queue: {e}"),
                        }
                    }
                }
                Err(e) => error!("storage: nvme{i}n{nsid}: identify: {e}"),
            }
        }
        if let Some(slot) = kernel::pcie_slot::slot_for(f.address) {
            info!(
                "storage: nvme{i} sits in hot-plug slot {} (port {}, attention button {}, power controller {}): removed in order on a button press",
                slot.number, slot.port, if slot.attention_button { "yes" } else { "no" }, if slot.power_controller { "yes" } else { "no" }
            );
            slots.push(SlotWatch { ctrl: i, slot, removed: false });
        }
        ctrls[i] = Some(Box::leak(Box::new(c)));
    }

    // The namespaces to serve, in command-line order (or every NVMe namespace found).
    let mut served: Vec<Served> = Vec::new();
    let all: Vec<(usize, u32)> = nvme_ns.iter().map(|(c, ns, _)| (*c, ns.nsid)).collect();
    let mut take_nvme = |ctrl: usize, nsid: u32, served: &mut Vec<Served>| -> bool {
        let Some(pos) = nvme_ns.iter().position(|(c, ns, _)| *c == ctrl && ns.nsid == nsid) else { return false };
        let (c, info, q) = nvme_ns.remove(pos);
        let Some(ctrl_ref) = ctrls[c] else { return false };
        match NvmeNamespace::new(ctrl_ref, info, q) {
            Ok(ns) => {
                served.push(Served { name: format!("nvme{c}n{nsid}"), dev: Backing::Local(Box::new(ns)) });
                true
            }
            Err(e) => {
                error!("storage: nvme{c}n{nsid}: {e}");
                false
            }
        }
    };
    let mut ok = true;
    if cfg.ns.is_empty() {
        for (c, n) in all {
            take_nvme(c, n, &mut served);
        }
    } else {
        for spec in &cfg.ns {
            match *spec {
                NsSpec::Nvme { ctrl, nsid } => {
                    // `ns=` always names the controller; a spec without one means the first.
                    let ctrl = ctrl.unwrap_or(0);
                    if !take_nvme(ctrl, nsid, &mut served) {
                        error!("storage: ns=nvme{ctrl}n{nsid}: no such NVMe namespace");
                        ok = false;
                    }
                }
                NsSpec::Ram { .. } | NsSpec::Null { .. } => {
                    let kind = if matches!(spec, NsSpec::Ram { .. }) { "ram" } else { "null" };
                    match Backing::build(spec, KernelHal, |_, _| Err("not a memory namespace")) {
                        Ok(dev) => served.push(Served { name: format!("{kind}{}", served.len()), dev }),
                        Err(e) => {
                            error!("storage: ns={kind}: {e}");
                            ok = false;
                        }
                    }
                }
            }
        }
    }
    for (k, s) in served.iter().enumerate() {
        let d = s.dev.as_dev();
        let what = describe(&s.dev);
        info!(
            "storage: namespace {} = {}: {} ({} blocks x {} B, {} MiB)",
            k + 1, s.name, what, d.num_blocks(), d.block_size(), (d.num_blocks() * d.block_size() as u64) >> 20
        );
    }

    let mut controllers: Vec<(usize, &'static Controller<KernelHal, KernelMmio>, bool)> =
        ctrls.iter().enumerate().filter_map(|(i, c)| c.map(|c| (i, c, false))).collect();
    for t in &cfg.tests {
        if *t == Test::Shutdown {
            for (i, c, shut) in controllers.iter_mut() {
                *shut = true;
                match c.shutdown() {
                    Ok(()) => info!("storage: selftest Shutdown nvme{i}: PASS normal shutdown complete (CSTS.SHST=10b)"),
                    Err(e) => {
                        error!("storage: selftest Shutdown nvme{i}: FAIL {e}");
                        ok = false;
                    }
                }
            }
            continue;
        }
        for s in served.iter_mut() {
            // RAM namespaces take the pattern test (data moved by KernelHal::copy_dma).
            if let (Backing::Ram(r), Test::Pattern(seed)) = (&mut s.dev, *t) {
                match pattern(&mut **r, seed, true, true) {
                    Ok(msg) => info!("storage: selftest {t:?} {}: PASS {msg}", s.name),
                    Err(msg) => {
                        error!("storage: selftest {t:?} {}: FAIL {msg}", s.name);
                        ok = false;
                    }
                }
            }
            let Backing::Local(ns) = &mut s.dev else { continue };
            let ns: &mut Ns = ns;
            let r = match *t {
                Test::Pattern(seed) => pattern(ns, seed, true, true),
                Test::Write(seed) => pattern(ns, seed, true, false),
                Test::Verify(seed) => pattern(ns, seed, false, true),
                Test::Bad => bad_requests(ns),
                Test::Bench => bench(ns),
                Test::Ops => ops(ns),
                Test::Big(seed) => big(ns, seed),
                Test::Shutdown => continue,
            };
            match r {
                Ok(msg) => info!("storage: selftest {t:?} {}: PASS {msg}", s.name),
                Err(msg) => {
                    error!("storage: selftest {t:?} {}: FAIL {msg}", s.name);
                    ok = false;
                }
            }
        }
    }
    Storage { ok, served, controllers, slots }
}

/// `len` bytes at `off` of a self-test buffer; an empty slice (the I/O then fails as
/// BufferTooSmall, a failed test) if they are not inside it.
fn slice(buf: &KernelDma, off: usize, len: usize) -> DmaSlice {
    DmaSlice::new(buf, off, len).unwrap_or(DmaSlice::EMPTY)
}

/// One-line description of a backing (kind, where the data lives).
pub fn describe(b: &Backing) -> String {
    match b {
        Backing::Local(n) => format!("NVMe nsid {}", n.info().nsid),
        Backing::Ram(r) => format!("RAM at {:#x}", r.paddr_of(0)),
        Backing::Null(_) => String::from("null (no data)"),
    }
}

/// The 8-byte pattern word at namespace byte offset `x` (splitmix64 of seed ^ x).
fn word(seed: u64, x: u64) -> u64 {
    let mut z = (seed ^ x).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Submit one I/O and wait for it (the driver reports a dead controller as Timeout).
fn run<D: BlockDevice + ?Sized>(ns: &mut D, io: &BlockIo) -> Result<(), BlockError> {
    ns.submit(io)?;
    let mut out = [BlockDone { tag: 0, result: Ok(()) }; 1];
    loop {
        if ns.poll(&mut out) == 1 {
            return out[0].result;
        }
    }
}

/// I/O sizes cycled through (bytes): 512 B .. 1 MiB, most not multiples of a PRP-list page.
const SIZES: [usize; 12] = [512, 4096, 1 << 20, 3 * 512, 65536 + 512, 8192, 131072 - 512, 520 * 512, 1 << 19, 3 * 4096, 255 * 512, 1 << 20];

fn pattern<D: BlockDevice + ?Sized>(ns: &mut D, seed: u64, write: bool, verify: bool) -> Result<String, String> {
    let bs = ns.block_size() as usize;
    let total = ns.num_blocks();
    let max = ns.max_transfer_blocks() as u64;
    let buf = KernelHal.dma_alloc((1 << 20) + 65536, 4096).map_err(|e| format!("{e}"))?;
    let t0 = kernel::time::now_ns();
    let (mut lba, mut k, mut ios, mut bad) = (0u64, 0usize, 0u64, 0u64);
    let mut chunk = [0u8; 512];
    while lba < total {
        let n = ((SIZES[k % SIZES.len()] / bs).max(1) as u64).min(total - lba);
        // Buffer offset: dword aligned, moving across pages so PRP lists start anywhere.
        let boff = (k * 1544) % 65536 & !3;
        let bytes = n as usize * bs;
        let base = lba * bs as u64;
        if write {
            for c in (0..bytes).step_by(512) {
                for w in 0..64 {
                    chunk[w * 8..w * 8 + 8].copy_from_slice(&word(seed, base + (c + w * 8) as u64).to_le_bytes());
                }
                buf.write(boff + c, &chunk);
            }
        }
        let mut done = 0u64;
        while done < n {
            let p = (n - done).min(max);
            let off = boff + done as usize * bs;
            let len = p as usize * bs;
            if write {
                run(ns, &BlockIo { op: BlockOp::Write, lba: lba + done, blocks: p as u32, buf: slice(&buf, off, len), tag: k as u64, fua: false })
                    .map_err(|e| format!("write lba {} +{p}: {e:?}", lba + done))?;
                ios += 1;
            }
            if verify {
                if write {
                    buf.fill(off, len, 0);
                }
                run(ns, &BlockIo { op: BlockOp::Read, lba: lba + done, blocks: p as u32, buf: slice(&buf, off, len), tag: k as u64, fua: false })
                    .map_err(|e| format!("read lba {} +{p}: {e:?}", lba + done))?;
                ios += 1;
            }
            done += p;
        }
        if verify {
            for c in (0..bytes).step_by(512) {
                buf.read(boff + c, &mut chunk);
                for w in 0..64 {
                    let want = word(seed, base + (c + w * 8) as u64);
                    if chunk[w * 8..w * 8 + 8] != want.to_le_bytes() {
                        if bad == 0 {
                            error!("storage: first mismatch at byte {}", base + (c + w * 8) as u64);
                        }
                        bad += 1;
                    }
                }
            }
        }
        lba += n;
        k += 1;
    }
    let ms = (kernel::time::now_ns() - t0) / 1_000_000;
    let what = match (write, verify) {
        (true, true) => "wrote and verified",
        (true, false) => "wrote",
        _ => "verified",
    };
    let msg = format!("{what} {} blocks ({} MiB) in {ios} I/Os of 512 B..1 MiB (max transfer {} KiB), seed {seed}, {bad} bad words, {ms} ms",
        total, (total * bs as u64) >> 20, max as usize * bs / 1024);
    if bad == 0 { Ok(msg) } else { Err(msg) }
}

/// First LBA the `big` test writes (odd: the data does not start on a 4 KiB boundary of the
/// namespace either).
const BIG_LBA: u64 = 9;
/// Largest transfer the `big` test uses. QEMU's NVMe model (7.2, hw/nvme/ctrl.c
/// `nvme_map_addr`) fails a command whose PRPs make more than 1024 mappings (one per PRP
/// entry, IOV_MAX) with Internal Error, whatever MDTS says: 4 MiB page-aligned is its
/// largest, and an unaligned buffer must then be a page shorter.
const BIG_MAX: usize = 4 << 20;

/// Large single-command transfers (chained PRP lists: > 512 list entries): a page-aligned
/// write and read of min(max transfer, 4 MiB), then the same range less one page rewritten
/// from a buffer starting at the last dword of a page and read into one at offset 0x204.
/// Each I/O is one command; data is the pattern keyed by namespace byte offset (seed and
/// seed+1 for the two rounds), so the backing file can be checked from outside.
fn big(ns: &mut Ns, seed: u64) -> Result<String, String> {
    let bs = ns.block_size() as usize;
    let max = (ns.max_transfer_blocks() as usize * bs).min(BIG_MAX);
    let room = ns.num_blocks().saturating_sub(BIG_LBA) as usize * bs;
    let bytes = max.min(room);
    if bytes < 2 * 4096 {
        return Err(format!("namespace or max transfer too small ({bytes} B)"));
    }
    let wbuf = KernelHal.dma_alloc(bytes + 8192, 4096).map_err(|e| format!("{e}"))?;
    let rbuf = KernelHal.dma_alloc(bytes + 8192, 4096).map_err(|e| format!("{e}"))?;
    let base = BIG_LBA * bs as u64;
    let mut chunk = [0u8; 512];
    let mut report = Vec::new();
    let mut failed = false;
    for (round, (len, wo, ro)) in [(bytes, 0usize, 0x1000usize), (bytes - 4096, 0xFFC, 0x204)].into_iter().enumerate() {
        let seed = seed + round as u64;
        let blocks = (len / bs) as u32;
        for c in (0..len).step_by(512) {
            for w in 0..64 {
                chunk[w * 8..w * 8 + 8].copy_from_slice(&word(seed, base + (c + w * 8) as u64).to_le_bytes());
            }
            wbuf.write(wo + c, &chunk);
        }
        rbuf.fill(0, bytes + 8192, 0);
        let before = ns.queue_stats().submitted;
        let io = |op, buf: DmaSlice| BlockIo { op, lba: BIG_LBA, blocks, buf, tag: round as u64, fua: false };
        run(ns, &io(BlockOp::Write, slice(&wbuf, wo, len))).map_err(|e| format!("write {len} B from offset {wo:#x}: {e:?}"))?;
        run(ns, &io(BlockOp::Read, slice(&rbuf, ro, len))).map_err(|e| format!("read {len} B into offset {ro:#x}: {e:?}"))?;
        let cmds = ns.queue_stats().submitted - before;
        let mut bad = 0u64;
        for c in (0..len).step_by(512) {
            rbuf.read(ro + c, &mut chunk);
            for w in 0..64 {
                if chunk[w * 8..w * 8 + 8] != word(seed, base + (c + w * 8) as u64).to_le_bytes() {
                    bad += 1;
                }
            }
        }
        let wpages = (wo % 4096 + len).div_ceil(4096);
        let rpages = (ro % 4096 + len).div_ceil(4096);
        failed |= bad != 0 || cmds != 2;
        report.push(format!(
            "{len} B in {cmds} commands (write from page offset {wo:#x}: {wpages} pages, read to {ro:#x}: {rpages} pages) {bad} bad words"
        ));
    }
    let msg = format!("at LBA {BIG_LBA}: {}", report.join("; "));
    if failed { Err(msg) } else { Ok(msg) }
}

fn bad_requests(ns: &mut Ns) -> Result<String, String> {
    let bs = ns.block_size() as usize;
    let total = ns.num_blocks();
    let buf = KernelHal.dma_alloc(8192, 4096).map_err(|e| format!("{e}"))?;
    let before = ns.queue_stats().submitted;
    let max = ns.max_transfer_blocks();
    let mut cases: Vec<(&str, BlockIo, fn(&BlockError) -> bool)> = alloc::vec![
        ("LBA beyond the end", BlockIo { op: BlockOp::Read, lba: total, blocks: 1, buf: slice(&buf, 0, bs), tag: 1, fua: false }, |e| matches!(e, BlockError::OutOfRange { .. })),
        ("range crossing the end", BlockIo { op: BlockOp::Write, lba: total - 1, blocks: 2, buf: slice(&buf, 0, 2 * bs), tag: 2, fua: false }, |e| matches!(e, BlockError::OutOfRange { .. })),
        ("zero length", BlockIo { op: BlockOp::Read, lba: 0, blocks: 0, buf: slice(&buf, 0, bs), tag: 3, fua: false }, |e| *e == BlockError::ZeroLength),
        ("buffer too small", BlockIo { op: BlockOp::Read, lba: 0, blocks: 8, buf: slice(&buf, 0, 4 * bs), tag: 4, fua: false }, |e| matches!(e, BlockError::BufferTooSmall { .. })),
        ("buffer not dword aligned", BlockIo { op: BlockOp::Read, lba: 0, blocks: 1, buf: slice(&buf, 1, bs), tag: 5, fua: false }, |e| *e == BlockError::Unsupported),
    ];
    // One block more than the largest transfer (when the namespace is that large).
    if total > max as u64 {
        let len = (max as usize + 1) * bs;
        cases.push(("above the maximum transfer", BlockIo { op: BlockOp::Read, lba: 0, blocks: max + 1, buf: slice(&buf, 0, len), tag: 8, fua: false }, |e| matches!(e, BlockError::TooLarge { .. })));
    }
    for (what, io, ok) in cases.iter() {
        match ns.submit(io) {
            Err(e) if ok(&e) => info!("storage: bad request ({what}): refused: {e:?}"),
            other => return Err(format!("{what}: got {other:?}")),
        }
    }
    if ns.queue_stats().submitted != before {
        return Err(String::from("a refused request reached the device"));
    }
    // The driver keeps working: write and read back one block at the last LBA.
    buf.fill(0, bs, 0xA5);
    run(ns, &BlockIo { op: BlockOp::Write, lba: total - 1, blocks: 1, buf: slice(&buf, 0, bs), tag: 6, fua: false }).map_err(|e| format!("write after bad requests: {e:?}"))?;
    buf.fill(0, bs, 0);
    run(ns, &BlockIo { op: BlockOp::Read, lba: total - 1, blocks: 1, buf: slice(&buf, 0, bs), tag: 7, fua: false }).map_err(|e| format!("read after bad requests: {e:?}"))?;
    let mut b = [0u8; 512];
    buf.read(0, &mut b);
    if b.iter().any(|x| *x != 0xA5) {
        return Err(String::from("data read after bad requests differs"));
    }
    Ok(format!("{} refused before the device, then I/O at the last LBA works", cases.len()))
}

fn bench(ns: &mut Ns) -> Result<String, String> {
    const QD: usize = 32;
    let bs = ns.block_size() as u64;
    let per = 4096 / bs;
    let span = ns.num_blocks() / per;
    let buf = KernelHal.dma_alloc(QD * 4096, 4096).map_err(|e| format!("{e}"))?;
    let mut rng = 0x1234_5678u64;
    let mut next_lba = || {
        rng = word(rng, 1);
        (rng % span) * per
    };
    // QD1.
    let n1 = 2000u64;
    let t0 = kernel::time::rdtsc();
    for i in 0..n1 {
        let lba = next_lba();
        run(ns, &BlockIo { op: BlockOp::Read, lba, blocks: per as u32, buf: slice(&buf, 0, 4096), tag: i, fua: false }).map_err(|e| format!("{e:?}"))?;
    }
    let ns1 = kernel::time::ticks_to_ns(kernel::time::rdtsc() - t0);
    // QD32: keep 32 in flight.
    let n32 = 8000u64;
    let mut out = [BlockDone { tag: 0, result: Ok(()) }; QD];
    let (mut sent, mut done) = (0u64, 0u64);
    let db0 = ns.queue_stats().sq_doorbells;
    let t0 = kernel::time::rdtsc();
    while done < n32 {
        while sent < n32 && sent - done < QD as u64 {
            let slot = sent % QD as u64;
            let lba = next_lba();
            ns.submit(&BlockIo { op: BlockOp::Read, lba, blocks: per as u32, buf: slice(&buf, slot as usize * 4096, 4096), tag: sent, fua: false })
                .map_err(|e| format!("{e:?}"))?;
            sent += 1;
        }
        let k = ns.poll(&mut out);
        for d in &out[..k] {
            d.result.map_err(|e| format!("{e:?}"))?;
        }
        done += k as u64;
    }
    let ns32 = kernel::time::ticks_to_ns(kernel::time::rdtsc() - t0);
    let dbs = ns.queue_stats().sq_doorbells - db0;
    let msg = format!(
        "4 KiB random read against QEMU's emulated NVMe (an emulation: figures show driver+emulator cost, not a drive): QD1 {} I/Os, avg latency {} us, {} IOPS; QD32 {} I/Os, {} IOPS, avg latency {} us (Little's law), {} SQ doorbells ({:.1} I/Os per doorbell)",
        n1, ns1 / n1 / 1000, n1 * 1_000_000_000 / ns1.max(1),
        n32, n32 * 1_000_000_000 / ns32.max(1), ns32 * QD as u64 / n32 / 1000, dbs, n32 as f64 / dbs.max(1) as f64
    );
    info!("storage: bench {msg}");
    Ok(msg)
}

fn ops(ns: &mut Ns) -> Result<String, String> {
    let bs = ns.block_size() as usize;
    let buf = KernelHal.dma_alloc(64 * bs, 4096).map_err(|e| format!("{e}"))?;
    let io = |op, lba, blocks| BlockIo { op, lba, blocks, buf: slice(&buf, 0, 64 * bs), tag: 0, fua: false };
    buf.fill(0, 64 * bs, 0x5A);
    run(ns, &io(BlockOp::Write, 0, 64)).map_err(|e| format!("write: {e:?}"))?;
    let mut done = Vec::new();
    if ns.supports(BlockOp::WriteZeroes) {
        run(ns, &io(BlockOp::WriteZeroes, 8, 16)).map_err(|e| format!("write zeroes: {e:?}"))?;
        run(ns, &io(BlockOp::Read, 0, 64)).map_err(|e| format!("read: {e:?}"))?;
        let mut b = alloc::vec![0u8; 64 * bs];
        buf.read(0, &mut b);
        let zeroed = b[8 * bs..24 * bs].iter().all(|x| *x == 0);
        let kept = b[..8 * bs].iter().chain(&b[24 * bs..]).all(|x| *x == 0x5A);
        if !(zeroed && kept) {
            return Err(format!("after Write Zeroes of blocks 8..24: zeroed {zeroed}, others kept {kept}"));
        }
        done.push("Write Zeroes (blocks 8..24 read back as zeros, neighbours intact)");
    } else {
        done.push("Write Zeroes not in ONCS: refused");
    }
    if ns.supports(BlockOp::Deallocate) {
        run(ns, &io(BlockOp::Deallocate, 32, 16)).map_err(|e| format!("deallocate: {e:?}"))?;
        done.push("Dataset Management deallocate completed");
    } else {
        done.push("Dataset Management not in ONCS: refused");
    }
    run(ns, &io(BlockOp::Flush, 0, 0)).map_err(|e| format!("flush: {e:?}"))?;
    done.push("Flush completed");
    Ok(done.join("; "))
}
