//! Memory keys [mlx5_ifc.h mkc, CREATE/DESTROY_MKEY].

#[allow(unused_imports)]
use super::*;

layouts! {
    mkc [0x40] {
        free = F(0x00, 30, 30),
        access_mode_4_2 = F(0x00, 28, 26),
        relaxed_ordering_write = F(0x00, 18, 18),
        small_fence_on_rdma_read_response = F(0x00, 16, 16),
        umr_en = F(0x00, 15, 15),
        a = F(0x00, 14, 14),
        rw = F(0x00, 13, 13),
        rr = F(0x00, 12, 12),
        lw = F(0x00, 11, 11),
        lr = F(0x00, 10, 10),
        access_mode_1_0 = F(0x00, 9, 8),
        qpn = F(0x04, 31, 8),
        mkey_7_0 = F(0x04, 7, 0),
        length64 = F(0x0c, 31, 31),
        bsf_en = F(0x0c, 30, 30),
        sync_umr = F(0x0c, 29, 29),
        expected_sigerr_count = F(0x0c, 26, 26),
        en_rinval = F(0x0c, 24, 24),
        pd = F(0x0c, 23, 0),
        start_addr = B(0x10, 0x8),
        len = B(0x18, 0x8),
        bsf_octword_size = F(0x20, 31, 0),
        translations_octword_size = F(0x34, 31, 0),
        relaxed_ordering_read = F(0x38, 6, 6),
        log_page_size = F(0x38, 4, 0),
        crypto_en = F(0x3c, 28, 27),
    }
    create_mkey_in [0x110] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        pg_access = F(0x0c, 31, 31),
        mkey_umem_valid = F(0x0c, 30, 30),
        memory_key_mkey_entry = S(0x10, &mkc::LAYOUT),
        translations_octword_actual_size = F(0x60, 31, 0),
        klm_pas_mtt = F(0x110, 31, 0),
    }
    create_mkey_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        mkey_index = F(0x08, 23, 0),
    }
    destroy_mkey_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        mkey_index = F(0x08, 23, 0),
    }
    destroy_mkey_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
}
