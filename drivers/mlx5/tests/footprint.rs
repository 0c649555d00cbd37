//! The driver's own size stays small enough for a bare-metal boot stack (the image brings the
//! adapter up on a 64 KiB stack): big command buffers live on the heap.

#[test]
fn mlx5_struct_fits_a_boot_stack_with_room_to_spare() {
    let n = core::mem::size_of::<mlx5::Mlx5<emu_connectx::SimHal, emu_connectx::Bar0>>();
    assert!(n < 8 * 1024, "mlx5::Mlx5 is {n} bytes");
}
