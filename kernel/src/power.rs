//! power: the ACPI fixed-feature power button, polled. A press (the server's button, a BMC's
//! "soft power off", QEMU's `system_powerdown`) sets PWRBTN_STS in the PM1 status register
//! once PWRBTN_EN is set in the PM1 enable register (ACPI 6.5 §4.8.3.1.1, §4.8.4.2.1); an
//! app arms the button with [`arm`] and asks [`pressed`] on its slow path to end cleanly.
//! The registers' I/O ports come from the FADT (PM1a event and control blocks, SMI_CMD and
//! ACPI_ENABLE), recorded by `acpi::init`; nothing is touched until [`arm`].
use x86_64::instructions::port::Port;

/// PM1 status/enable bit of the power button (ACPI 6.5 Table 4.16 / 4.17).
const PWRBTN: u16 = 1 << 8;
/// PM1 control: SCI_EN, set once the platform is in ACPI mode (ACPI 6.5 Table 4.18).
const SCI_EN: u16 = 1;

/// The FADT's fixed-hardware facts this module uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pm1 {
    /// PM1a event block: status register at `event`, enable register at `event + len / 2`.
    pub event: u16,
    pub event_len: u8,
    /// PM1a control block (SCI_EN).
    pub control: u16,
    /// SMI command port and the value that hands the fixed events to the OS (0: none needed).
    pub smi_cmd: u16,
    pub acpi_enable: u8,
}

static PM1: spin::Once<Pm1> = spin::Once::new();
static ARMED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Record the FADT's registers (acpi::init). Blocks that are not 16-bit-wide I/O ports are
/// not recorded (no power button then).
pub(crate) fn record(p: Pm1) {
    if p.event != 0 && p.event_len >= 4 && p.control != 0 {
        PM1.call_once(|| p);
    }
}

/// Turn the power button on: ACPI mode (SMI_CMD <- ACPI_ENABLE, when SCI_EN is still clear, so
/// firmware stops handling the button itself), a stale press cleared, PWRBTN_EN set. Returns
/// false (and changes nothing) when the FADT gave no usable PM1 registers.
pub fn arm() -> bool {
    let Some(p) = PM1.get().copied() else { return false };
    let mut control: Port<u16> = Port::new(p.control);
    let mut status: Port<u16> = Port::new(p.event);
    let mut enable: Port<u16> = Port::new(p.event + u16::from(p.event_len / 2));
    // SAFETY: PM1a control/status/enable are the platform's fixed ACPI registers named by the
    // FADT; the kernel is their only user. SMI_CMD with ACPI_ENABLE is the handover the
    // specification defines; the 8259s are masked, so an SCI raises no interrupt.
    unsafe {
        if control.read() & SCI_EN == 0 && p.smi_cmd != 0 && p.acpi_enable != 0 {
            Port::<u8>::new(p.smi_cmd).write(p.acpi_enable);
            let _ = crate::time::wait_until(1_000_000_000, || control.read() & SCI_EN != 0);
        }
        status.write(PWRBTN);
        let en = enable.read();
        enable.write(en | PWRBTN);
    }
    ARMED.store(true, core::sync::atomic::Ordering::Relaxed);
    true
}

/// Whether the power button was pressed since the last call (the press is acknowledged).
pub fn pressed() -> bool {
    if !ARMED.load(core::sync::atomic::Ordering::Relaxed) {
        return false;
    }
    let Some(p) = PM1.get() else { return false };
    let mut status: Port<u16> = Port::new(p.event);
    // SAFETY: as in `arm`; writing 1 clears only the power-button status bit.
    unsafe {
        if status.read() & PWRBTN == 0 {
            return false;
        }
        status.write(PWRBTN);
    }
    true
}
