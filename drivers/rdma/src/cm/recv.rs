//! cm::recv: what the CM does with a received MAD — REQ (checks, bounds, duplicates, stale
//! connections), REP, RTU, REJ, MRA, DREQ, DREP — each after the source checks (module `cm`).

use super::*;

impl<V: Verbs> Cm<V> {
    pub(super) fn handle_mad(&mut self, v: &mut V, m: &[u8; GRH_LEN + MAD_LEN]) {
        self.stats.mads_rx += 1;
        let src_ip: Ipv4 = [m[32], m[33], m[34], m[35]];
        let (h, msg) = match CmMsg::parse(&m[GRH_LEN..]) {
            Ok(x) => x,
            Err(e) => {
                debug!("cm: bad MAD from {src_ip:?}: {e:?}");
                self.stats.bad_mads += 1;
                return;
            }
        };
        match msg {
            CmMsg::Req(r) => self.on_req(v, src_ip, h.tid, r),
            CmMsg::Rep(r) => self.on_rep(v, src_ip, h.tid, r),
            CmMsg::Rtu(r) => match self.conn_from(src_ip, r.remote_comm_id) {
                Some(c) if c.remote_id == r.local_comm_id && c.state == State::RepSent => self.establish(r.remote_comm_id, pad(&r.private_data)),
                _ => self.stats.ignored += 1,
            },
            CmMsg::Rej(r) => self.on_rej(v, src_ip, r),
            CmMsg::Mra(r) => self.on_mra(src_ip, r),
            CmMsg::Dreq(r) => self.on_dreq(v, src_ip, h.tid, r),
            CmMsg::Drep(r) => match self.conn_from(src_ip, r.remote_comm_id) {
                Some(c) if c.remote_id == r.local_comm_id && c.state == State::DreqSent => self.close(v, r.remote_comm_id),
                _ => self.stats.ignored += 1,
            },
        }
    }

    /// Our connection `local_id`, if `src_ip` is its peer. A MAD from any other source that
    /// names it is counted (`wrong_source`) and must not touch it.
    pub(super) fn conn_from(&mut self, src_ip: Ipv4, local_id: u32) -> Option<&Conn> {
        match self.conns.get(local_id) {
            Some(c) if c.peer_ip != src_ip => {
                self.stats.wrong_source += 1;
                None
            }
            c => c,
        }
    }

    pub(super) fn reply_rej(&mut self, v: &mut V, ip: Ipv4, tid: u64, remote_id: u32, msg: u8, reason: u16) {
        let Some(mac) = v.resolve_mac(ip) else {
            self.stats.no_route += 1;
            return;
        };
        let rej = Rej { local_comm_id: 0, remote_comm_id: remote_id, message_rejected: msg, reject_info_length: 0, reason, ari: [0; rej_f::ARI_LEN], private_data: [0; rej_f::PRIVATE_DATA_LEN] };
        self.send_mad(v, ip, mac, &CmMsg::Rej(rej).encode(tid));
    }

    pub(super) fn on_req(&mut self, v: &mut V, src_ip: Ipv4, tid: u64, r: Req) {
        let r = self.cfg.clamps.req(r, &mut self.stats.clamped);
        self.on_clamped_req(v, src_ip, tid, r);
    }

    /// Hold a new REQ whose source has no MAC yet (ARP was asked) until it has one, if there
    /// is room; a REQ already held for the same source and comm ID is not held twice.
    fn hold_unrouted(&mut self, src_ip: Ipv4, tid: u64, r: Req) {
        if self.unrouted.iter().any(|u| u.src_ip == src_ip && u.req.local_comm_id == r.local_comm_id) {
            return;
        }
        if self.unrouted.len() < self.cfg.limits.unrouted_reqs {
            self.stats.route_waits += 1;
            self.unrouted.push(Unrouted { src_ip, tid, req: r, until: self.now.saturating_add(self.cfg.limits.unrouted_wait_ns) });
        }
    }

    /// The timer scan's part for held REQs: each whose source now resolves is handled as if
    /// it had just arrived (duplicate and stale checks included); each past its wait is
    /// dropped. Bounded by `CmLimits::unrouted_reqs`.
    pub(super) fn replay_unrouted(&mut self, v: &mut V) {
        let mut i = 0;
        while i < self.unrouted.len() {
            let u = self.unrouted[i];
            if v.resolve_mac(u.src_ip).is_some() {
                self.unrouted.swap_remove(i);
                self.stats.route_waits_answered += 1;
                self.on_clamped_req(v, u.src_ip, u.tid, u.req);
            } else if self.now >= u.until {
                self.unrouted.swap_remove(i);
                self.stats.route_waits_expired += 1;
            } else {
                i += 1;
            }
        }
    }

    fn on_clamped_req(&mut self, v: &mut V, src_ip: Ipv4, tid: u64, r: Req) {
        // The source address is the peer's identity from here on: a REQ must name it as its
        // Primary Local Port GID (RoCEv2: the IPv4-mapped source address), so nobody can make
        // a REQ that speaks for another host's connections.
        if ipv4_from_gid(&r.primary.local_gid) != Some(src_ip) {
            self.stats.wrong_source += 1;
            return self.reply_rej(v, src_ip, tid, r.local_comm_id, msg_code::REQ, rej_reason::INVALID_GID);
        }
        // Duplicate of a REQ we know (same source, comm ID and CA GUID): resend what we last sent for it.
        let known = self.by_req.get(key(src_ip, r.local_comm_id)).and_then(|id| self.conns.get(id));
        let dup = known.map(|c| (c.id, c.state, c.last, c.peer_ip, c.peer_mac, c.connected, c.remote_guid));
        if let Some((id, state, last, ip, mac, connected, guid)) = dup {
            if guid != r.local_ca_guid {
                // The same source reusing a comm ID under another CA GUID.
                self.stats.ignored += 1;
                return self.reply_rej(v, src_ip, tid, r.local_comm_id, msg_code::REQ, rej_reason::DUPLICATE_LOCAL_COMM_ID);
            }
            self.stats.dup_reqs += 1;
            match (state, last) {
                (State::MraReqSent | State::RepSent, Some(m)) => self.send_mad(v, ip, mac, &m),
                (State::TimeWait, Some(m)) if !connected => self.send_mad(v, ip, mac, &m), // our REJ again
                (State::TimeWait, _) => {
                    self.stats.stale_rejects += 1;
                    self.reply_rej(v, src_ip, tid, r.local_comm_id, msg_code::REQ, rej_reason::STALE_CONN);
                }
                _ => debug!("cm: duplicate REQ for {id:#x} ignored"),
            }
            return;
        }
        let Some(mac) = v.resolve_mac(src_ip) else {
            self.stats.no_route += 1;
            return self.hold_unrouted(src_ip, tid, r);
        };
        // Stale: the same remote QP (same source address, CA GUID and QPN) is still connected
        // under another ID: that peer has lost the old connection (IBA 12.9.8.3.1), so it
        // gets REJ STALE_CONN and the old one is disconnected. Only its own source can claim
        // that: a REQ from elsewhere naming a victim's GUID and QPN is not a match. A
        // connection in timewait no longer holds its remote QPN (Linux cm_enter_timewait takes
        // it out of the remote-QPN table), so a peer that reuses a QPN at once is served.
        let old = self.by_qpn.get(key(src_ip, r.local_qpn)).and_then(|id| self.conns.get(id));
        if let Some(old) = old.filter(|c| c.connected && c.state != State::TimeWait && c.remote_guid == r.local_ca_guid).map(|c| (c.id, c.state)) {
            self.stats.stale_rejects += 1;
            self.reply_rej(v, src_ip, tid, r.local_comm_id, msg_code::REQ, rej_reason::STALE_CONN);
            if matches!(old.1, State::Established | State::RepSent) {
                let _ = self.disconnect(v, ConnId(old.0));
            }
            return;
        }
        let port = match tcp_port_of_service_id(r.service_id) {
            Some(p) if self.listeners.contains(&p) => p,
            _ => return self.reply_rej(v, src_ip, tid, r.local_comm_id, msg_code::REQ, rej_reason::INVALID_SERVICE_ID),
        };
        if r.transport_service_type != 0 {
            return self.reply_rej(v, src_ip, tid, r.local_comm_id, msg_code::REQ, rej_reason::INVALID_TRANSPORT_TYPE);
        }
        if ipv4_from_gid(&r.primary.remote_gid) != Some(v.local_ip()) {
            return self.reply_rej(v, src_ip, tid, r.local_comm_id, msg_code::REQ, rej_reason::INVALID_GID);
        }
        if mtu_enum_to_bytes(r.path_mtu).is_none() {
            return self.reply_rej(v, src_ip, tid, r.local_comm_id, msg_code::REQ, rej_reason::INVALID_MTU);
        }
        let cma = match CmaHdr::parse(&r.private_data) {
            Ok(h) if h.dst_ip == v.local_ip() => h,
            _ => return self.reply_rej(v, src_ip, tid, r.local_comm_id, msg_code::REQ, rej_reason::CONSUMER_DEFINED),
        };
        // Bounds: the table, then the source's rate and share (cm_limits).
        let admitted = if self.conns.len() >= self.conns.capacity() { Err(Refusal::TableFull) } else { self.limiter.admit(src_ip, self.now) };
        if let Err(why) = admitted {
            self.refused(why);
            return self.reply_rej(v, src_ip, tid, r.local_comm_id, msg_code::REQ, rej_reason::NO_RESOURCES);
        }
        let peer_ip = src_ip;
        let inserted = self.insert_conn(|id| Conn {
            id,
            role: Role::Passive,
            state: State::ReqRcvd,
            remote_id: r.local_comm_id,
            remote_guid: r.local_ca_guid,
            remote_qpn: r.local_qpn,
            peer_ip,
            peer_mac: mac,
            qpn: None,
            port,
            req_tid: tid,
            last: None,
            deadline: None,
            timeout_ns: 0,
            retries_left: 0,
            my_psn: 0,
            flow_label: r.primary.flow_label,
            mtu: 0,
            req: Some(r),
            active: None,
            connected: false,
            app_qp: false,
            offered: None,
            admitted: true,
        });
        let Some(id) = inserted else {
            // Not reached: the table had room above.
            self.limiter.release(src_ip);
            self.refused(Refusal::TableFull);
            return self.reply_rej(v, src_ip, tid, r.local_comm_id, msg_code::REQ, rej_reason::NO_RESOURCES);
        };
        self.by_req.insert(key(src_ip, r.local_comm_id), id);
        // The app must decide (or MRA) before the peer gives up; after that, forget it.
        let give_up = (r.max_cm_retries as u64 + 1) * self.req_timeout_ns(r.remote_cm_response_timeout);
        if let Some(c) = self.conns.get_mut(id) {
            c.deadline = Some(self.now.saturating_add(give_up));
        }
        self.events.push_back(CmEvent::ConnectRequest(ConnectRequest {
            id: ConnId(id),
            port,
            peer_ip,
            peer_port: cma.src_port,
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            private_data: pad(&r.private_data[cma_f::LEN..]),
        }));
    }

    pub(super) fn on_rep(&mut self, v: &mut V, src_ip: Ipv4, tid: u64, r: Rep) {
        let r = self.cfg.clamps.rep(r, &mut self.stats.clamped);
        if !self.conns.contains_key(r.remote_comm_id) {
            self.reply_rej(v, src_ip, tid, r.local_comm_id, msg_code::REP, rej_reason::INVALID_COMM_ID);
            return;
        }
        if self.conn_from(src_ip, r.remote_comm_id).is_none() {
            return;
        }
        let Some(c) = self.conns.get(r.remote_comm_id) else { return };
        if c.role != Role::Active {
            self.stats.ignored += 1;
            return;
        }
        match c.state {
            State::ReqSent | State::MraReqRcvd => {}
            State::Established if c.remote_id == r.local_comm_id => {
                // Our RTU was lost: send it again (Linux cm_dup_rep_handler).
                if let Some(m) = c.last {
                    let (ip, mac) = (c.peer_ip, c.peer_mac);
                    self.stats.resends += 1;
                    self.send_mad(v, ip, mac, &m);
                }
                return;
            }
            _ => {
                self.stats.ignored += 1;
                return;
            }
        }
        let id = c.id;
        let a = c.active.expect("active");
        let Some(qpn) = c.qpn else { return };
        let mut access = a.access;
        let max_dest_rd_atomic = r.initiator_depth.min(a.responder_resources);
        access.remote_read &= max_dest_rd_atomic > 0;
        let attrs = RcConnectAttrs {
            remote_qpn: Qpn(r.local_qpn),
            remote_ip: c.peer_ip,
            remote_mac: c.peer_mac,
            // Starting PSN = the sender's rq_psn (Linux cm_rep_handler: sq_psn from the REP).
            rq_psn: c.my_psn,
            sq_psn: r.starting_psn,
            mtu: c.mtu,
            udp_sport: flow_label_to_udp_sport(c.flow_label),
            retry_cnt: self.cfg.retry_count,
            rnr_retry: r.rnr_retry_count,
            timeout: self.cfg.local_ack_timeout,
            min_rnr_timer: self.cfg.min_rnr_timer,
            max_rd_atomic: r.responder_resources.min(a.initiator_depth),
            max_dest_rd_atomic,
            access,
        };
        let (peer_ip, peer_mac, req_tid) = (c.peer_ip, c.peer_mac, c.req_tid);
        if let Err(e) = v.connect_rc_qp(qpn, &attrs) {
            warn!("cm: connect {qpn} failed: {e:?}");
            let rej = Rej { local_comm_id: id, remote_comm_id: r.local_comm_id, message_rejected: msg_code::REP, reject_info_length: 0, reason: rej_reason::NO_QP, ari: [0; rej_f::ARI_LEN], private_data: [0; rej_f::PRIVATE_DATA_LEN] };
            self.send_mad(v, peer_ip, peer_mac, &CmMsg::Rej(rej).encode(req_tid));
            self.drop_qp(v, id);
            self.forget(id);
            self.events.push_back(CmEvent::Unreachable { id: ConnId(id) });
            return;
        }
        let c = self.conns.get_mut(id).expect("present");
        c.remote_id = r.local_comm_id;
        c.remote_guid = r.local_ca_guid;
        c.remote_qpn = r.local_qpn;
        c.connected = true;
        let k = key(c.peer_ip, r.local_qpn);
        self.by_qpn.insert(k, id);
        let rtu = Rtu { local_comm_id: id, remote_comm_id: r.local_comm_id, private_data: [0; short_f::RTU_PRIVATE_DATA_LEN] };
        self.send_for(v, id, CmMsg::Rtu(rtu).encode(req_tid), None);
        self.establish(id, r.private_data);
    }

    pub(super) fn on_rej(&mut self, v: &mut V, src_ip: Ipv4, r: Rej) {
        let Some(c) = self.conn_from(src_ip, r.remote_comm_id) else {
            self.stats.ignored += 1;
            return;
        };
        // Once the peer's comm ID is known (from its REQ or REP) the REJ must carry it; only
        // a REJ of our own REQ may come before that, with whatever ID the peer has (Linux
        // cm_acquire_rejected_id looks such a REJ up by our ID alone; IBA 12.6.7). A REJ
        // carrying 0 gets no pass.
        if c.remote_id != 0 && c.remote_id != r.local_comm_id {
            self.stats.ignored += 1;
            return;
        }
        if c.remote_id == 0 && r.message_rejected != msg_code::REQ {
            self.stats.ignored += 1;
            return;
        }
        let id = c.id;
        match c.state {
            State::ReqSent | State::MraReqRcvd | State::Resolving => {
                self.drop_qp(v, id);
                self.forget(id);
                self.events.push_back(CmEvent::Rejected { id: ConnId(id), reason: r.reason, private_data: r.private_data });
            }
            State::RepSent | State::MraReqSent | State::ReqRcvd => {
                self.drop_qp(v, id);
                self.enter_timewait(id);
                self.events.push_back(CmEvent::Rejected { id: ConnId(id), reason: r.reason, private_data: r.private_data });
            }
            State::Established if r.reason == rej_reason::STALE_CONN => self.close(v, id),
            _ => self.stats.ignored += 1,
        }
    }

    pub(super) fn on_mra(&mut self, src_ip: Ipv4, r: Mra) {
        let r = self.cfg.clamps.mra(r, &mut self.stats.clamped);
        let now = self.now;
        let plt = 2 * cm_time_ns(self.cfg.packet_life_time);
        if self.conn_from(src_ip, r.remote_comm_id).is_none() {
            self.stats.ignored += 1;
            return;
        }
        let Some(c) = self.conns.get_mut(r.remote_comm_id) else { return };
        // The MRA of a REQ comes before we know the peer's ID; after that it must carry it.
        if c.remote_id != 0 && c.remote_id != r.local_comm_id {
            self.stats.ignored += 1;
            return;
        }
        let ok = match (c.state, r.message_mraed) {
            (State::ReqSent | State::MraReqRcvd, msg_code::REQ) => {
                c.state = State::MraReqRcvd;
                true
            }
            (State::RepSent, msg_code::REP) => true,
            _ => false,
        };
        if ok {
            // The peer needs service_timeout more: push the resend timer out, keep the retries.
            c.deadline = Some(now.saturating_add(cm_time_ns(r.service_timeout)).saturating_add(plt));
        } else {
            self.stats.ignored += 1;
        }
    }

    pub(super) fn on_dreq(&mut self, v: &mut V, src_ip: Ipv4, tid: u64, r: Dreq) {
        // Found only by both comm IDs from the connection's own peer (Linux cm_dreq_handler
        // looks it up by the ID pair); the QPN is checked below.
        let wrong_source = self.conns.get(r.remote_comm_id).is_some_and(|c| c.peer_ip != src_ip);
        if wrong_source {
            self.stats.wrong_source += 1;
            return;
        }
        let found = self.conns.get(r.remote_comm_id).filter(|c| c.remote_id == r.local_comm_id).map(|c| (c.id, c.state, c.qpn, c.peer_ip, c.peer_mac));
        let drep = |id: u32| Drep { local_comm_id: id, remote_comm_id: r.local_comm_id, private_data: [0; short_f::DREP_PRIVATE_DATA_LEN] };
        match found {
            Some((id, state, qpn, ip, mac)) => match state {
                State::Established | State::RepSent | State::DreqSent => {
                    if qpn.is_some_and(|q| q.0 != r.remote_qpn) {
                        // Linux cm_dreq_handler: DREQ for another QP is ignored.
                        self.stats.ignored += 1;
                        return;
                    }
                    let m = CmMsg::Drep(drep(id)).encode(tid);
                    self.send_mad(v, ip, mac, &m);
                    self.close(v, id);
                    if let Some(c) = self.conns.get_mut(id) {
                        c.last = Some(m);
                    }
                }
                State::TimeWait => {
                    let m = CmMsg::Drep(drep(id)).encode(tid);
                    self.send_mad(v, ip, mac, &m);
                }
                _ => self.stats.ignored += 1,
            },
            None => {
                // Unknown IDs: answer anyway so the peer can finish.
                let Some(mac) = v.resolve_mac(src_ip) else {
                    self.stats.no_route += 1;
                    return;
                };
                let m = CmMsg::Drep(drep(r.remote_comm_id)).encode(tid);
                self.send_mad(v, src_ip, mac, &m);
            }
        }
    }
}
