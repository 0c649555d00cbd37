//! The shared receive queue as ISSI-1 firmware offers it: the RMP [mlx5_ifc.h rmpc, *_rmp_*].

#[allow(unused_imports)]
use super::*;

layouts! {
    // ---- RMP: the shared receive queue as ISSI-1 firmware offers it (mlx5_ifc.h rmpc, *_rmp_*) ----
    rmpc [0xf0] {
        state = F(0x00, 23, 20),
        basic_cyclic_rcv_wqe = F(0x04, 31, 31),
        wq = S(0x30, &wq::LAYOUT),
    }
    create_rmp_in [0x110] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        ctx = S(0x20, &rmpc::LAYOUT),
    }
    create_rmp_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        rmpn = F(0x08, 23, 0),
    }
    rmp_bitmask [0x8] {
        lwm = F(0x04, 0, 0),
    }
    modify_rmp_in [0x110] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        rmp_state = F(0x08, 31, 28),
        rmpn = F(0x08, 23, 0),
        bitmask = S(0x10, &rmp_bitmask::LAYOUT),
        ctx = S(0x20, &rmpc::LAYOUT),
    }
    destroy_rmp_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        rmpn = F(0x08, 23, 0),
    }
    query_rmp_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        rmpn = F(0x08, 23, 0),
    }
    query_rmp_out [0x110] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        rmp_context = S(0x20, &rmpc::LAYOUT),
    }
}
