//! Ports and their subsystem links, as Linux nvmet keeps them in configfs (`ports/P` with its
//! address, `ports/P/subsystems/NQN` a link): a subsystem is served and listed only through a
//! port it is linked to. A Connect that comes in on a port the subsystem is not linked to gets
//! the answer an unknown subsystem gets (Connect Invalid Parameters on SUBNQN; nvmet: "connect
//! request for invalid subsystem"), and a discovery controller lists the subsystems linked to
//! its own port, with that port's address (nvmet's discovery log page walks
//! `req->port->subsystems`). Removing a link deletes the controllers that came in through that
//! port (nvmet: `nvmet_port_del_ctrls`); the others keep running.

use alloc::vec::Vec;

use blockdev::BlockDevice;

use super::Core;

/// Ports a target may have (a subsystem's links are one bit each).
pub const MAX_PORTS: usize = 64;

impl<B: BlockDevice> Core<B> {
    /// Check the ports (at most [`MAX_PORTS`], distinct IDs, distinct addresses, links only to
    /// subsystems that exist) and set each subsystem's links from them. No port: every
    /// subsystem is served through the one implicit port 0.
    pub(super) fn init_links(&mut self) -> Result<(), &'static str> {
        let ports = &self.cfg.ports;
        if ports.len() > MAX_PORTS {
            return Err("more than 64 ports");
        }
        for (i, p) in ports.iter().enumerate() {
            if ports[..i].iter().any(|q| q.portid == p.portid) {
                return Err("two ports with one port ID");
            }
            if ports[..i].iter().any(|q| q.traddr == p.traddr && q.trsvcid == p.trsvcid) {
                return Err("two ports on one address and service ID");
            }
            if let Some(names) = &p.subsystems {
                if names.iter().any(|n| !self.subsystems.iter().any(|s| s.cfg.nqn == *n)) {
                    return Err("a port links a subsystem that is not defined");
                }
            }
        }
        for s in &mut self.subsystems {
            s.links = if ports.is_empty() { 1 } else { 0 };
            for (i, p) in ports.iter().enumerate() {
                if p.subsystems.as_ref().is_none_or(|names| names.iter().any(|n| *n == s.cfg.nqn)) {
                    s.links |= 1 << i;
                }
            }
        }
        Ok(())
    }

    /// The index in `TargetConfig::ports` of port `portid`.
    pub fn port_index(&self, portid: u16) -> Option<usize> {
        self.cfg.ports.iter().position(|p| p.portid == portid)
    }

    /// The port a connection to service ID (TCP port space) `trsvcid` comes in on, by its index
    /// in `TargetConfig::ports` (the appliance has one address, so the service ID names it); 0
    /// when the target has no port. `None`: no port listens there.
    pub fn port_for_service(&self, trsvcid: u16) -> Option<u8> {
        if self.cfg.ports.is_empty() {
            return Some(0);
        }
        self.cfg.ports.iter().position(|p| p.trsvcid == trsvcid).map(|i| i as u8)
    }

    /// Whether subsystem `si` is linked to the port at index `port`.
    pub(super) fn linked_via(&self, si: usize, port: u8) -> bool {
        self.subsystems.get(si).is_some_and(|s| (port as usize) < MAX_PORTS && s.links & (1 << port) != 0)
    }

    /// Unlink subsystem `nqn` from port `portid`, as removing its link under the nvmet configfs
    /// port does: from now on a Connect to it through that port gets the answer an unknown
    /// subsystem gets (Connect Invalid Parameters, Do Not Retry, on SUBNQN) and that port's
    /// discovery log leaves it out, until [`Core::link_subsystem`]. The controllers that came in
    /// through that port are freed here; their CNTLIDs are returned so the transport closes
    /// their queues (nvmet deletes them, the host sees its queues disconnected); those of other
    /// ports are left alone. `None`: no such port or subsystem. Slow path (operator action).
    pub fn unlink_subsystem(&mut self, portid: u16, nqn: &str) -> Option<Vec<u16>> {
        let pi = self.port_index(portid)?;
        let si = self.subsystems.iter().position(|s| s.cfg.nqn == nqn)?;
        if self.subsystems[si].links & (1 << pi) != 0 {
            self.subsystems[si].links &= !(1 << pi);
            self.genctr += 1;
            log::warn!("nvmeof: target: {nqn} unlinked from port {portid}: its controllers there deleted, Connects refused");
        }
        let ids: Vec<u16> = self.ctrls.iter().flatten().filter(|c| c.subsys == Some(si) && c.port as usize == pi).map(|c| c.cntlid).collect();
        Some(ids)
    }

    /// Link subsystem `nqn` to port `portid` (again): served and listed through it. False: no
    /// such port or subsystem.
    pub fn link_subsystem(&mut self, portid: u16, nqn: &str) -> bool {
        let Some(pi) = self.port_index(portid) else { return false };
        let Some(s) = self.subsystems.iter_mut().find(|s| s.cfg.nqn == nqn) else { return false };
        if s.links & (1 << pi) == 0 {
            s.links |= 1 << pi;
            self.genctr += 1;
            log::info!("nvmeof: target: {nqn} linked to port {portid}");
        }
        true
    }

    /// Whether subsystem `nqn` is linked to port `portid` (`None`: no such port or subsystem).
    pub fn subsystem_linked(&self, portid: u16, nqn: &str) -> Option<bool> {
        let pi = self.port_index(portid)?;
        self.subsystems.iter().find(|s| s.cfg.nqn == nqn).map(|s| s.links & (1 << pi) != 0)
    }
}
