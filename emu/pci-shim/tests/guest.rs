//! The shim driven the way a guest drives it: through a second mapping of the same two files
//! (like QEMU's), first by hand (doorbell words, sentinels, the cmdq address handshake), then
//! with the real mlx5 driver bringing the adapter up from another thread.
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use emu_pci_shim::{SharedMap, Shim, ShimStats, BAR_FILE_SIZE, SENTINEL32};
use hal::{DmaRegion, Hal, HalError, Mmio, PhysAddr};

const RAM: usize = 64 << 20;
/// Time a slow guest takes per 8-byte word it copies out of DMA memory.
const GUEST_WORD_COPY: Duration = Duration::from_micros(3);

/// Per-test file paths in /dev/shm (tmpfs, like the QEMU setup), removed on drop.
struct Files(PathBuf, PathBuf);
impl Files {
    fn new(tag: &str) -> Files {
        let dir = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let p = std::process::id();
        let f = Files(dir.join(format!("shim-test-{p}-{tag}-ram")), dir.join(format!("shim-test-{p}-{tag}-bar")));
        let _ = std::fs::remove_file(&f.0);
        let _ = std::fs::remove_file(&f.1);
        f
    }
}
impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_file(&self.1);
    }
}

/// The guest's view of BAR0: plain loads and stores into the shared BAR file.
#[derive(Clone)]
struct GuestBar(Arc<SharedMap>);
impl Mmio for GuestBar {
    fn size(&self) -> usize {
        emu_connectx::BAR0_SIZE
    }
    fn read32(&self, off: usize) -> u32 {
        self.0.word32(off).load(SeqCst)
    }
    fn write32(&self, off: usize, v: u32) {
        self.0.word32(off).store(v, SeqCst)
    }
    fn write64(&self, off: usize, v: u64) {
        self.0.word64(off).store(v, SeqCst)
    }
}

/// The guest's platform: DMA memory bump-allocated in the shared RAM file from 1 MiB.
#[derive(Clone)]
struct GuestHal(Arc<SharedMap>, Arc<std::sync::Mutex<u64>>, Instant);
struct GuestDma(Arc<SharedMap>, PhysAddr, usize);
impl DmaRegion for GuestDma {
    fn paddr(&self) -> PhysAddr {
        self.1
    }
    fn len(&self) -> usize {
        self.2
    }
    /// Word by word with a pause after each, as a guest under TCG copies: the adapter's
    /// writes (on the shim's thread) can land in the middle of a copy, as they do under QEMU.
    fn read(&self, off: usize, buf: &mut [u8]) {
        assert!(off + buf.len() <= self.2);
        for (i, w) in buf.chunks_mut(8).enumerate() {
            assert!(self.0.read(self.1 + (off + 8 * i) as u64, w));
            let t = Instant::now();
            while t.elapsed() < GUEST_WORD_COPY {
                std::hint::spin_loop();
            }
        }
    }
    fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.2 && self.0.write(self.1 + off as u64, data));
    }
}
impl Hal for GuestHal {
    type Dma = GuestDma;
    fn dma_alloc(&self, size: usize, align: usize) -> Result<GuestDma, HalError> {
        let a = align.max(4096) as u64;
        let mut next = self.1.lock().unwrap();
        let pa = (*next + a - 1) & !(a - 1);
        if pa + size as u64 > RAM as u64 {
            return Err(HalError::OutOfMemory { size, align });
        }
        *next = pa + size as u64;
        Ok(GuestDma(self.0.clone(), pa, size))
    }
    fn now_ns(&self) -> u64 {
        self.2.elapsed().as_nanos() as u64
    }
    fn relax(&self) {
        std::hint::spin_loop();
    }
}

#[test]
fn doorbell_words_are_consumed_once_and_cmdq_address_round_trips() {
    let f = Files::new("hand");
    let mut shim = Shim::open(&f.0, RAM, &f.1, emu_connectx::Config::default()).unwrap();
    let guest = GuestBar(Arc::new(SharedMap::open(&f.1, BAR_FILE_SIZE).unwrap()));
    // Read side: firmware 16.35.2000, cmdif rev 5, log size/stride published before any write.
    assert_eq!(guest.read32_be(0x000), (35 << 16) | 16);
    assert_eq!(guest.read32_be(0x004), (5 << 16) | 2000);
    assert_eq!(guest.read32_be(0x014) & 0xff, 0x56);
    // The cmdq address handshake: the guest's writes reach the model, whose read-back
    // (address + the read-only size/stride) replaces them in the file.
    guest.write32_be(0x010, 0);
    guest.write32_be(0x014, 0x0010_0000);
    shim.turn();
    assert_eq!(shim.stats.cmdq_addr_writes, 1, "0x010 was already 0: no change seen");
    assert_eq!(guest.read32_be(0x014), 0x0010_0056);
    // An EQ doorbell for EQ 0 with ci 0 is the value 0: still seen (sentinel is all-ones),
    // taken once, and the word is re-armed with the sentinel.
    let eq_db = (emu_connectx::FIRST_UAR as usize) * 0x1000 + 0x48;
    assert_eq!(guest.read32(eq_db), SENTINEL32);
    guest.write32(eq_db, 0);
    let stray0 = shim.cx.counters().stray_doorbells;
    shim.turn();
    shim.turn();
    assert_eq!(shim.stats.uar_doorbells, 1);
    assert_eq!(shim.cx.counters().stray_doorbells, stray0 + 1, "no such UAR yet: the model calls it stray, once");
    assert_eq!(guest.read32(eq_db), SENTINEL32);
    // The command doorbell is taken (swapped to 0) and handed to the model.
    std::thread::sleep(Duration::from_millis(3)); // past the model's 2 ms `initializing`
    shim.turn();
    assert_eq!(guest.read32_be(0x1fc) >> 31, 0, "initializing cleared and republished");
    guest.write32_be(0x018, 1);
    shim.turn();
    assert_eq!(shim.stats.cmd_doorbells, 1);
    assert_eq!(guest.read32(0x018), 0);
}

/// The real mlx5 driver brings the adapter (device profile `profile`) up and sets up verbs
/// from another thread, through the shared files. Returns the shim's and the model's figures.
fn drive_mlx5(tag: &str, profile: emu_connectx::Profile) -> (String, ShimStats, emu_connectx::Counters) {
    let f = Files::new(tag);
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let (ram, bar, stop2) = (f.0.clone(), f.1.clone(), stop.clone());
    let vf = mlx5::pci_id(profile.pci_vendor_id, profile.pci_device_id).is_some_and(|i| i.vf);
    let shim = std::thread::spawn(move || {
        let cfg = emu_connectx::Config { profile, ..Default::default() };
        let mut s = Shim::open(&ram, RAM, &bar, cfg).unwrap();
        ready_tx.send(()).unwrap();
        s.run(Duration::ZERO, |_| stop2.load(SeqCst));
        (s.stats, s.cx.counters())
    });
    ready_rx.recv().unwrap();
    let ram = Arc::new(SharedMap::open(&f.0, RAM).unwrap());
    let hal = GuestHal(ram, Arc::new(std::sync::Mutex::new(1 << 20)), Instant::now());
    let bar = GuestBar(Arc::new(SharedMap::open(&f.1, BAR_FILE_SIZE).unwrap()));
    let mut cfg = mlx5::Config { ipv4: [10, 0, 0, 1], vf, ..mlx5::Config::default() };
    // A command that waits for pages never completing is a test failure, not a minute's wait.
    cfg.timeouts.cmd_ns = 10_000_000_000;
    let verbs = mlx5::Mlx5Verbs::bring_up(hal, bar, cfg);
    stop.store(true, SeqCst);
    let (stats, ctr) = shim.join().unwrap();
    let verbs = verbs.expect("bring-up over the shared files");
    let fw = verbs.fw();
    drop(verbs);
    (format!("{fw}"), stats, ctr)
}

#[test]
fn mlx5_driver_brings_the_adapter_up_through_the_shared_files() {
    let (fw, stats, ctr) = drive_mlx5("mlx5", emu_connectx::Profile::default());
    assert_eq!(fw, "16.35.2000");
    assert!(stats.cmd_doorbells >= 10, "{stats:?}");
    assert_eq!(stats.cmd_doorbells, ctr.commands, "every doorbell ran exactly one command");
    assert_eq!(ctr.delivery_failures, 0);
    assert_eq!(ctr.dma_faults, 0);
    assert!(ctr.eqs >= 1 && ctr.pages_held > 0, "{ctr:?}");
}

/// connectx7 firmware asks for pages in the middle of CREATE_CQ/QP/MKEY and holds the command
/// until MANAGE_PAGES arrives on the reserved last slot: through the shared files the driver
/// must see the page request while it waits and its slot-31 doorbell must reach the model
/// while the first slot is still held.
#[test]
fn page_request_in_the_middle_of_a_command_is_answered_through_the_shared_files() {
    let p = emu_connectx::Profile::by_name("connectx7").expect("connectx7 profile");
    let (_, stats, ctr) = drive_mlx5("cx7", p);
    assert!(ctr.mid_command_page_requests >= 1, "the profile parked a command for pages: {ctr:?}");
    assert_eq!(stats.cmd_doorbells, ctr.commands, "every doorbell ran exactly one command: {stats:?} {ctr:?}");
    assert_eq!(ctr.delivery_failures, 0);
    assert_eq!(ctr.dma_faults, 0);
    assert_eq!(ctr.hung_commands, 0);
}

/// A doorbell record the guest's driver rewrites while the adapter reads it (a CQ's consumer
/// counter going 0xff -> 0x100 and back) is never read torn through the shim's DMA reads, and a
/// word the adapter writes is never seen torn by the guest: aligned words are single atomic
/// accesses, not byte copies.
#[test]
fn aligned_dma_words_are_never_torn_between_guest_and_adapter() {
    let files = Files::new("torn");
    let guest = Arc::new(SharedMap::open(&files.0, 1 << 20).unwrap());
    let adapter = SharedMap::open(&files.0, 1 << 20).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (g, s) = (guest.clone(), stop.clone());
    let flipper = std::thread::spawn(move || {
        let mut n = 0u64;
        while !s.load(SeqCst) {
            let v: u32 = if n % 2 == 0 { 0xff } else { 0x100 };
            g.word32(0x40).store(v.to_be(), SeqCst);
            let w: u64 = if n % 2 == 0 { 0xffff_ffff } else { 0x1_0000_0000 };
            g.word64(0x80).store(w.to_be(), SeqCst);
            n += 1;
        }
        n
    });
    let (mut torn, mut reads) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_millis(300);
    while Instant::now() < deadline {
        let (mut b4, mut b8) = ([0u8; 4], [0u8; 8]);
        assert!(adapter.read(0x40, &mut b4) && adapter.read(0x80, &mut b8));
        let (v, w) = (u32::from_be_bytes(b4), u64::from_be_bytes(b8));
        torn += u64::from(!matches!(v, 0 | 0xff | 0x100)) + u64::from(!matches!(w, 0 | 0xffff_ffff | 0x1_0000_0000));
        reads += 1;
    }
    stop.store(true, SeqCst);
    let flips = flipper.join().unwrap();
    assert!(flips > 1000 && reads > 1000, "both sides ran: {flips} flips, {reads} reads");
    assert_eq!(torn, 0, "{torn} torn words in {reads} reads");
    // The other direction: the adapter's 4-byte writes, as the guest reads them.
    let stop = Arc::new(AtomicBool::new(false));
    let (g, s) = (guest.clone(), stop.clone());
    let reader = std::thread::spawn(move || {
        let mut torn = 0u64;
        while !s.load(SeqCst) {
            torn += u64::from(!matches!(u32::from_be(g.word32(0xc0).load(SeqCst)), 0 | 0xff | 0x100));
        }
        torn
    });
    for n in 0..200_000u32 {
        let v: u32 = if n % 2 == 0 { 0xff } else { 0x100 };
        assert!(adapter.write(0xc0, &v.to_be_bytes()));
    }
    stop.store(true, SeqCst);
    assert_eq!(reader.join().unwrap(), 0, "the guest saw a torn word the adapter wrote");
}
