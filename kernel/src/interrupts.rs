//! GDT with a TSS whose IST stacks serve the faults that must not run on a broken stack
//! (double fault, NMI, machine check, page fault), one pair per CPU, and one IDT for all CPUs
//! covering every architectural exception (Intel SDM vol. 3A, table 6-1). Each handler prints
//! the CPU number, vector, name, error code, RIP, CR2, stops the other CPUs and the image with
//! a failure status. The legacy 8259 PICs are masked: the appliance polls and takes no device
//! interrupts; the only interrupt is the IPI that wakes a parked CPU ([`crate::smp`]).
use x86_64::instructions::port::Port;
use x86_64::instructions::segmentation::{Segment, CS, DS, ES, SS};
use x86_64::instructions::tables::load_tss;
use x86_64::registers::control::Cr2;
use x86_64::structures::gdt::{Descriptor, GlobalDescriptorTable, SegmentSelector};
use x86_64::structures::idt::{InterruptDescriptorTable, InterruptStackFrame, PageFaultErrorCode};
use x86_64::structures::tss::TaskStateSegment;
use x86_64::VirtAddr;

const IST_DOUBLE_FAULT: u16 = 0;
const IST_NMI: u16 = 1;
const IST_MACHINE_CHECK: u16 = 2;
const IST_PAGE_FAULT: u16 = 3;
const IST_STACK: usize = 16 * 1024;
/// IST stack bytes per CPU (four stacks).
pub const IST_BYTES: usize = 4 * IST_STACK;

#[repr(C, align(16))]
struct Stack([u8; IST_STACK]);
static mut IST_STACKS: [Stack; 4] = [const { Stack([0; IST_STACK]) }; 4];

static TSS: spin::Once<TaskStateSegment> = spin::Once::new();
static GDT: spin::Once<(GlobalDescriptorTable, [SegmentSelector; 3])> = spin::Once::new();
static IDT: spin::Once<InterruptDescriptorTable> = spin::Once::new();

/// One CPU's GDT (code, data, its TSS) and selectors.
pub struct CpuTables {
    gdt: &'static GlobalDescriptorTable,
    sel: [SegmentSelector; 3],
}

/// A TSS whose IST entries are the tops of four stacks, in `stack_tops` order.
fn tss_with(stack_tops: [u64; 4]) -> TaskStateSegment {
    let mut tss = TaskStateSegment::new();
    for (slot, top) in [IST_DOUBLE_FAULT, IST_NMI, IST_MACHINE_CHECK, IST_PAGE_FAULT].iter().zip(stack_tops) {
        tss.interrupt_stack_table[*slot as usize] = VirtAddr::new(top);
    }
    tss
}

fn gdt_with(tss: &'static TaskStateSegment) -> (GlobalDescriptorTable, [SegmentSelector; 3]) {
    let mut gdt = GlobalDescriptorTable::new();
    let code = gdt.append(Descriptor::kernel_code_segment());
    let data = gdt.append(Descriptor::kernel_data_segment());
    let tss_sel = gdt.append(Descriptor::tss_segment(tss));
    (gdt, [code, data, tss_sel])
}

fn load(gdt: &'static GlobalDescriptorTable, sel: [SegmentSelector; 3]) {
    gdt.load();
    // SAFETY: the selectors index the GDT just loaded, which lives forever; its TSS is this
    // CPU's own (a TSS descriptor is marked busy by `ltr`, so no two CPUs share one).
    unsafe {
        CS::set_reg(sel[0]);
        DS::set_reg(sel[1]);
        ES::set_reg(sel[1]);
        SS::set_reg(sel[1]);
        load_tss(sel[2]);
    }
}

/// Build an application processor's GDT and TSS, its IST stacks carved from `ist`
/// ([`IST_BYTES`] bytes it owns for good). Built by the boot CPU, loaded by the AP ([`init_ap`]).
pub fn ap_tables(ist: &'static mut [u8]) -> CpuTables {
    let base = ist.as_ptr() as u64;
    let tops = core::array::from_fn(|i| (base + ((i + 1) * IST_STACK) as u64) & !0xf);
    let tss: &'static TaskStateSegment = alloc::boxed::Box::leak(alloc::boxed::Box::new(tss_with(tops)));
    let (gdt, sel) = gdt_with(tss);
    CpuTables { gdt: alloc::boxed::Box::leak(alloc::boxed::Box::new(gdt)), sel }
}

/// Load an AP's own GDT and TSS and the shared IDT (built by [`init`] on the boot CPU).
pub fn init_ap(t: CpuTables) {
    load(t.gdt, t.sel);
    if let Some(idt) = IDT.get() {
        idt.load();
    }
}

/// Load GDT, TSS and IDT on the boot CPU; mask the PICs.
pub fn init() {
    let tss = TSS.call_once(|| {
        // Each IST stack is used only by the boot CPU for its vector; only its address is taken.
        let base = core::ptr::addr_of!(IST_STACKS) as u64;
        tss_with(core::array::from_fn(|i| base + ((i + 1) * IST_STACK) as u64))
    });
    let (gdt, sel) = GDT.call_once(|| gdt_with(tss));
    load(gdt, *sel);
    let idt = IDT.call_once(|| {
        let mut idt = InterruptDescriptorTable::new();
        idt.divide_error.set_handler_fn(divide_error);
        idt.debug.set_handler_fn(debug);
        idt.breakpoint.set_handler_fn(breakpoint);
        idt.overflow.set_handler_fn(overflow);
        idt.bound_range_exceeded.set_handler_fn(bound_range);
        idt.invalid_opcode.set_handler_fn(invalid_opcode);
        idt.device_not_available.set_handler_fn(device_not_available);
        idt.invalid_tss.set_handler_fn(invalid_tss);
        idt.segment_not_present.set_handler_fn(segment_not_present);
        idt.stack_segment_fault.set_handler_fn(stack_segment);
        idt.general_protection_fault.set_handler_fn(general_protection);
        idt.x87_floating_point.set_handler_fn(x87_floating_point);
        idt.alignment_check.set_handler_fn(alignment_check);
        idt.simd_floating_point.set_handler_fn(simd_floating_point);
        idt.virtualization.set_handler_fn(virtualization);
        idt.cp_protection_exception.set_handler_fn(control_protection);
        idt.hv_injection_exception.set_handler_fn(hv_injection);
        idt.vmm_communication_exception.set_handler_fn(vmm_communication);
        idt.security_exception.set_handler_fn(security);
        // SAFETY: the IST indices are set in the TSS loaded above.
        unsafe {
            idt.double_fault.set_handler_fn(double_fault).set_stack_index(IST_DOUBLE_FAULT);
            idt.non_maskable_interrupt.set_handler_fn(nmi).set_stack_index(IST_NMI);
            idt.machine_check.set_handler_fn(machine_check).set_stack_index(IST_MACHINE_CHECK);
            idt.page_fault.set_handler_fn(page_fault).set_stack_index(IST_PAGE_FAULT);
        }
        idt[crate::smp::WAKE_VECTOR].set_handler_fn(wake);
        idt[crate::apic::SPURIOUS_VECTOR].set_handler_fn(spurious);
        idt
    });
    idt.load();
    mask_pics();
}

fn mask_pics() {
    let mut m: Port<u8> = Port::new(0x21);
    let mut s: Port<u8> = Port::new(0xa1);
    // SAFETY: writing the 8259 interrupt mask registers masks all legacy IRQs.
    unsafe {
        m.write(0xff);
        s.write(0xff);
    }
}

/// Print the exception with the CPU it happened on, stop the other CPUs, and end with a
/// failure status. A CPU failing after another one already reports just halts.
fn report(vector: u8, name: &str, error: Option<u64>, frame: &InterruptStackFrame) -> ! {
    let cpu = crate::percpu::this_cpu();
    if !crate::smp::claim_failure() {
        crate::exit::halt();
    }
    crate::smp::stop_others();
    let cr2 = Cr2::read_raw();
    let rip = frame.instruction_pointer.as_u64();
    let rsp = frame.stack_pointer.as_u64();
    match error {
        Some(e) => crate::console::emergency_write(format_args!(
            "EXCEPTION on cpu {cpu}: vector {vector} ({name}) error code {e:#x} at RIP {rip:#018x} CR2 {cr2:#018x} RSP {rsp:#018x}\n"
        )),
        None => crate::console::emergency_write(format_args!(
            "EXCEPTION on cpu {cpu}: vector {vector} ({name}) error code none at RIP {rip:#018x} CR2 {cr2:#018x} RSP {rsp:#018x}\n"
        )),
    }
    crate::exit::fail()
}

/// The wake IPI: its only job is to end a parked CPU's `hlt`.
extern "x86-interrupt" fn wake(_frame: InterruptStackFrame) {
    crate::apic::eoi();
}

/// A spurious local-APIC interrupt: no EOI (SDM vol. 3A §11.9).
extern "x86-interrupt" fn spurious(_frame: InterruptStackFrame) {}

/// NMI: the stop signal while another CPU fails ([`crate::smp::stop_others`]), else a fault.
extern "x86-interrupt" fn nmi(frame: InterruptStackFrame) {
    if crate::smp::stopping() {
        crate::exit::halt();
    }
    report(2, "NMI", None, &frame)
}

macro_rules! plain {
    ($f:ident, $v:expr, $n:expr) => {
        extern "x86-interrupt" fn $f(frame: InterruptStackFrame) {
            report($v, $n, None, &frame)
        }
    };
}
macro_rules! with_code {
    ($f:ident, $v:expr, $n:expr) => {
        extern "x86-interrupt" fn $f(frame: InterruptStackFrame, code: u64) {
            report($v, $n, Some(code), &frame)
        }
    };
}

plain!(divide_error, 0, "#DE divide error");
plain!(debug, 1, "#DB debug");
plain!(breakpoint, 3, "#BP breakpoint");
plain!(overflow, 4, "#OF overflow");
plain!(bound_range, 5, "#BR bound range exceeded");
plain!(invalid_opcode, 6, "#UD invalid opcode");
plain!(device_not_available, 7, "#NM device not available");
with_code!(invalid_tss, 10, "#TS invalid TSS");
with_code!(segment_not_present, 11, "#NP segment not present");
with_code!(stack_segment, 12, "#SS stack-segment fault");
with_code!(general_protection, 13, "#GP general protection");
plain!(x87_floating_point, 16, "#MF x87 floating point");
with_code!(alignment_check, 17, "#AC alignment check");
plain!(simd_floating_point, 19, "#XM SIMD floating point");
plain!(virtualization, 20, "#VE virtualization");
with_code!(control_protection, 21, "#CP control protection");
plain!(hv_injection, 28, "#HV hypervisor injection");
with_code!(vmm_communication, 29, "#VC VMM communication");
with_code!(security, 30, "#SX security");

extern "x86-interrupt" fn double_fault(frame: InterruptStackFrame, code: u64) -> ! {
    report(8, "#DF double fault", Some(code), &frame)
}

extern "x86-interrupt" fn machine_check(frame: InterruptStackFrame) -> ! {
    report(18, "#MC machine check", None, &frame)
}

extern "x86-interrupt" fn page_fault(frame: InterruptStackFrame, code: PageFaultErrorCode) {
    report(14, "#PF page fault", Some(code.bits()), &frame)
}
