//! Queue counters [mlx5_ifc.h ALLOC/DEALLOC/QUERY_Q_COUNTER].

#[allow(unused_imports)]
use super::*;

layouts! {
    // ---- queue counters: mlx5_ifc.h alloc_/dealloc_/query_q_counter_{in,out} (the
    // counter set a QP names in qpc.counter_set_id; Linux mlx5_ib's hw_counters read them) ----
    alloc_q_counter_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
    }
    alloc_q_counter_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        counter_set_id = F(0x08, 7, 0),
    }
    dealloc_q_counter_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        counter_set_id = F(0x08, 7, 0),
    }
    dealloc_q_counter_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    query_q_counter_in [0x20] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        clear = F(0x18, 31, 31),
        aggregate = F(0x18, 30, 30),
        counter_set_id = F(0x1c, 7, 0),
    }
    query_q_counter_out [0x100] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        rx_write_requests = F(0x10, 31, 0),
        rx_read_requests = F(0x18, 31, 0),
        rx_atomic_requests = F(0x20, 31, 0),
        rx_dct_connect = F(0x28, 31, 0),
        out_of_buffer = F(0x30, 31, 0),
        out_of_sequence = F(0x38, 31, 0),
        duplicate_request = F(0x40, 31, 0),
        rnr_nak_retry_err = F(0x48, 31, 0),
        packet_seq_err = F(0x50, 31, 0),
        implied_nak_seq_err = F(0x58, 31, 0),
        local_ack_timeout_err = F(0x60, 31, 0),
        req_rnr_retries_exceeded = F(0x70, 31, 0),
        resp_local_length_error = F(0x78, 31, 0),
        req_local_length_error = F(0x7c, 31, 0),
        resp_local_qp_error = F(0x80, 31, 0),
        local_operation_error = F(0x84, 31, 0),
        resp_local_protection = F(0x88, 31, 0),
        req_local_protection = F(0x8c, 31, 0),
        resp_cqe_error = F(0x90, 31, 0),
        req_cqe_error = F(0x94, 31, 0),
        req_mw_binding = F(0x98, 31, 0),
        req_bad_response = F(0x9c, 31, 0),
        req_remote_invalid_request = F(0xa0, 31, 0),
        resp_remote_invalid_request = F(0xa4, 31, 0),
        req_remote_access_errors = F(0xa8, 31, 0),
        resp_remote_access_errors = F(0xac, 31, 0),
        req_remote_operation_errors = F(0xb0, 31, 0),
        req_transport_retries_exceeded = F(0xb4, 31, 0),
        cq_overflow = F(0xb8, 31, 0),
        resp_cqe_flush_error = F(0xbc, 31, 0),
        req_cqe_flush_error = F(0xc0, 31, 0),
    }
}
