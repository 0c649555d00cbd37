//! Prints every declared mlx5 layout field: `struct.field.subfield bit_offset bit_width`.
fn main() {
    for l in mlx5_ifc::ifc::ALL {
        mlx5_ifc::layout::walk(l, |path, f| println!("{} {} {}", path.join("."), f.off, f.width));
    }
}
