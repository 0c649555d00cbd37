//! Where a poll group's value lives, and the park handshake by which the owner takes it back
//! from a thread driving it: the owner holds the value ("home", plain field access, no atomic)
//! unless it sent it away to a thread ([`GroupCell::send_away`]); that thread checks one flag
//! per turn (one Acquire load, [`Away::turn`]) and, when the owner asked ([`GroupCell::park`]),
//! puts the value back and waits until the owner gives it back ([`GroupCell::unpark`]). The
//! value crosses in a `spin::Mutex` slot, locked only by the handshake (slow path). On one
//! thread (image `cpus=1`, emu/sim) the values stay home and the owner's code runs unchanged.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

/// What the owner and the driving thread share while the value is away.
struct Exchange<G> {
    /// The value on its way between the two: put here by the thread when the owner asked
    /// (or when the thread lets it go), and by the owner when it gives it back.
    slot: spin::Mutex<Option<G>>,
    /// The owner wants the value home: written by the owner only, read by the thread once
    /// per turn.
    asked: AtomicBool,
}

/// One poll group's value as the owner holds it: home, or away with a thread.
pub struct GroupCell<G> {
    /// The value while the owner holds it (always, when no thread drives it; while parked).
    home: Option<G>,
    /// The value was sent away ([`GroupCell::send_away`]) and not called back for good
    /// ([`GroupCell::call_back`]).
    away: bool,
    ex: Arc<Exchange<G>>,
    /// Times the owner took the value back from a thread ([`GroupCell::park`]).
    parks: u64,
}

/// A thread's hold on a value sent away: the value and the owner's flag. Dropping it puts
/// the value back in the slot for the owner ([`GroupCell::call_back`]).
pub struct Away<G> {
    value: Option<G>,
    ex: Arc<Exchange<G>>,
    /// Times this thread put the value back because the owner asked.
    yields: u64,
}

impl<G> GroupCell<G> {
    /// A cell with `g` home.
    pub fn new(g: G) -> GroupCell<G> {
        GroupCell { home: Some(g), away: false, ex: Arc::new(Exchange { slot: spin::Mutex::new(None), asked: AtomicBool::new(false) }), parks: 0 }
    }

    /// The value, when home (always on one thread; while parked).
    #[inline(always)]
    pub fn home(&self) -> Option<&G> {
        self.home.as_ref()
    }

    /// The value, when home, to work on.
    #[inline(always)]
    pub fn home_mut(&mut self) -> Option<&mut G> {
        self.home.as_mut()
    }

    /// The value, taken out of the cell (home only).
    pub fn into_home(self) -> Option<G> {
        self.home
    }

    /// Whether a thread drives the value (sent away and not called back; parked or not).
    pub fn is_away(&self) -> bool {
        self.away
    }

    /// Times the owner took the value back from its thread.
    pub fn parks(&self) -> u64 {
        self.parks
    }

    /// Send the value to a thread: the returned hold is what the thread drives it through.
    /// `None` if it is not home or not the owner's to send (parked).
    pub fn send_away(&mut self) -> Option<Away<G>> {
        if self.away {
            return None;
        }
        let value = Some(self.home.take()?);
        self.away = true;
        Some(Away { value, ex: self.ex.clone(), yields: 0 })
    }

    /// Take the value back from its thread until [`GroupCell::unpark`]: ask, wait until the
    /// thread has put it back (at its next turn, or as it let go), hold it home. A value
    /// home already (never sent away, or parked) is left as it is.
    pub fn park(&mut self) {
        if self.home.is_some() || !self.away {
            return;
        }
        self.ex.asked.store(true, Ordering::Release);
        loop {
            if let Some(g) = self.ex.slot.lock().take() {
                self.home = Some(g);
                self.parks += 1;
                return;
            }
            core::hint::spin_loop();
        }
    }

    /// Give a parked value back to its thread (which resumes its turns). Nothing when the
    /// value is not away.
    pub fn unpark(&mut self) {
        if !self.away {
            return;
        }
        if let Some(g) = self.home.take() {
            *self.ex.slot.lock() = Some(g);
        }
        self.ex.asked.store(false, Ordering::Release);
    }

    /// Take the value home for good from a thread that let it go (its [`Away`] dropped, e.g.
    /// at the end of a `std::thread::scope`; parked or not). False while the thread still
    /// holds its [`Away`].
    pub fn call_back(&mut self) -> bool {
        if !self.away {
            return self.home.is_some();
        }
        // The thread's hold shares the exchange until it is dropped.
        if Arc::strong_count(&self.ex) > 1 {
            return false;
        }
        if self.home.is_none() {
            self.home = self.ex.slot.lock().take();
        }
        self.away = false;
        self.ex.asked.store(false, Ordering::Release);
        self.home.is_some()
    }
}

impl<G> Away<G> {
    /// The value for one turn. The per-turn cost is one Acquire load of the owner's flag; when
    /// the owner asked, the value goes back and this waits until the owner gives it back
    /// (`None` only if the owner took it for good, which it does not while this holds it).
    #[inline(always)]
    pub fn turn(&mut self) -> Option<&mut G> {
        if self.ex.asked.load(Ordering::Acquire) {
            self.yield_to_owner();
        }
        self.value.as_mut()
    }

    /// Times this thread put the value back because the owner asked.
    pub fn yields(&self) -> u64 {
        self.yields
    }

    #[cold]
    #[inline(never)]
    fn yield_to_owner(&mut self) {
        let Some(g) = self.value.take() else { return };
        *self.ex.slot.lock() = Some(g);
        self.yields += 1;
        // Until the owner gave it back (it may park again before this sees the flag low: then
        // the slot is empty again and this waits once more).
        loop {
            while self.ex.asked.load(Ordering::Acquire) {
                core::hint::spin_loop();
            }
            if let Some(g) = self.ex.slot.lock().take() {
                self.value = Some(g);
                return;
            }
            core::hint::spin_loop();
        }
    }
}

impl<G> Drop for Away<G> {
    /// The value goes back to the slot, for the owner's [`GroupCell::call_back`] (or a
    /// [`GroupCell::park`] waiting for it).
    fn drop(&mut self) {
        if let Some(g) = self.value.take() {
            *self.ex.slot.lock() = Some(g);
        }
    }
}

/// The owner's table of its groups' cells, by group number: every owner access to a group
/// value goes through it (the one place that changes when groups run on threads). A value
/// away with a thread is not there: [`GroupCells::get`] answers `None` for it, the walks
/// pass it by (keeping group numbers), indexing it panics (the owner parks a group before
/// it reaches in). On one thread every value is home.
pub struct GroupCells<G>(Vec<GroupCell<G>>);

impl<G> GroupCells<G> {
    pub const fn new() -> GroupCells<G> {
        GroupCells(Vec::new())
    }
    /// Groups, home or away.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn try_reserve_exact(&mut self, n: usize) -> Result<(), alloc::collections::TryReserveError> {
        self.0.try_reserve_exact(n)
    }
    /// A new group, home, numbered `len()`.
    pub fn push(&mut self, g: G) {
        self.0.push(GroupCell::new(g));
    }
    /// The last group's value, its cell gone (`None` if away).
    pub fn pop(&mut self) -> Option<G> {
        self.0.pop().and_then(GroupCell::into_home)
    }
    /// Every group's value, in group order, the cells gone (those away are dropped with
    /// their cells: the owner calls its groups back first).
    pub fn drain_all(&mut self) -> impl Iterator<Item = G> + '_ {
        self.0.drain(..).filter_map(GroupCell::into_home)
    }
    /// Group `gi`'s value, if home.
    #[inline(always)]
    pub fn get(&self, gi: usize) -> Option<&G> {
        self.0.get(gi)?.home()
    }
    #[inline(always)]
    pub fn get_mut(&mut self, gi: usize) -> Option<&mut G> {
        self.0.get_mut(gi)?.home_mut()
    }
    /// Group `gi`'s cell (to send its value away, park it, call it back).
    pub fn cell_mut(&mut self, gi: usize) -> Option<&mut GroupCell<G>> {
        self.0.get_mut(gi)
    }
    /// The values home, in group order.
    pub fn iter(&self) -> impl Iterator<Item = &G> + '_ {
        self.0.iter().filter_map(GroupCell::home)
    }
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut G> + '_ {
        self.0.iter_mut().filter_map(GroupCell::home_mut)
    }
    /// The values home with their group numbers.
    pub fn iter_at(&self) -> impl Iterator<Item = (usize, &G)> + '_ {
        self.0.iter().enumerate().filter_map(|(gi, c)| Some((gi, c.home()?)))
    }
    pub fn iter_at_mut(&mut self) -> impl Iterator<Item = (usize, &mut G)> + '_ {
        self.0.iter_mut().enumerate().filter_map(|(gi, c)| Some((gi, c.home_mut()?)))
    }
}

impl<G> Default for GroupCells<G> {
    fn default() -> Self {
        Self::new()
    }
}

impl<G> core::ops::Index<usize> for GroupCells<G> {
    type Output = G;
    #[inline(always)]
    fn index(&self, gi: usize) -> &G {
        match self.0[gi].home() {
            Some(g) => g,
            None => away(gi),
        }
    }
}

impl<G> core::ops::IndexMut<usize> for GroupCells<G> {
    #[inline(always)]
    fn index_mut(&mut self, gi: usize) -> &mut G {
        match self.0[gi].home_mut() {
            Some(g) => g,
            None => away(gi),
        }
    }
}

#[cold]
#[inline(never)]
fn away(gi: usize) -> ! {
    panic!("poll group {gi} reached while away with its thread (park it first)")
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;

    /// A stand-in group: the turns it has run and a mark the owner sets.
    struct Counting {
        turns: u64,
        mark: u64,
    }

    #[test]
    fn the_owner_parks_a_group_another_thread_turns_changes_it_and_hands_it_back() {
        let mut cell = GroupCell::new(Counting { turns: 0, mark: 0 });
        let away = cell.send_away().expect("home");
        assert!(cell.home().is_none() && cell.is_away());
        let stop = AtomicBool::new(false);
        // Turns the thread ran, published for the owner to watch (not part of the value).
        let seen = AtomicU64::new(0);
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                let mut away = away;
                let mut marks_seen = 0;
                while !stop.load(Ordering::Relaxed) {
                    let Some(g) = away.turn() else { break };
                    g.turns += 1;
                    if g.mark != 0 {
                        marks_seen = g.mark;
                    }
                    seen.store(g.turns, Ordering::Relaxed);
                }
                (away.yields(), marks_seen)
            });
            while seen.load(Ordering::Relaxed) < 1000 {
                std::hint::spin_loop();
            }
            cell.park();
            let at_park = cell.home().expect("parked value is home").turns;
            // No turn runs while parked: the count stands still.
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(cell.home().unwrap().turns, at_park);
            assert_eq!(seen.load(Ordering::Relaxed), at_park);
            cell.home_mut().unwrap().mark = 7;
            cell.unpark();
            assert!(cell.home().is_none());
            while seen.load(Ordering::Relaxed) < at_park + 1000 {
                std::hint::spin_loop();
            }
            stop.store(true, Ordering::Relaxed);
            let (yields, marks_seen) = t.join().unwrap();
            assert_eq!(yields, 1, "the value went home once, when the owner asked");
            assert_eq!(marks_seen, 7, "the thread turned the value the owner changed");
        });
        assert_eq!(cell.parks(), 1);
        assert!(cell.call_back());
        assert!(!cell.is_away());
        let g = cell.into_home().expect("home for good");
        assert!(g.turns >= 2000);
        assert_eq!(g.mark, 7);
    }

    #[test]
    fn the_owners_table_reaches_only_values_home_and_keeps_group_numbers() {
        let mut cells = GroupCells::new();
        for n in 0..3 {
            cells.push(Counting { turns: 0, mark: n });
        }
        let away = cells.cell_mut(1).unwrap().send_away().unwrap();
        assert!(cells.get(1).is_none() && cells.get(2).is_some());
        let at: Vec<(usize, u64)> = cells.iter_at().map(|(gi, g)| (gi, g.mark)).collect();
        assert_eq!(at, [(0, 0), (2, 2)]);
        assert_eq!(cells.len(), 3);
        drop(away);
        assert!(cells.cell_mut(1).unwrap().call_back());
        assert_eq!(cells[1].mark, 1);
        assert_eq!(cells.drain_all().map(|g| g.mark).collect::<Vec<_>>(), [0, 1, 2]);
    }

    #[test]
    fn turns_without_a_park_never_send_the_value_home() {
        let mut cell = GroupCell::new(Counting { turns: 0, mark: 0 });
        let mut away = cell.send_away().unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..100_000 {
                    away.turn().unwrap().turns += 1;
                }
                assert_eq!(away.yields(), 0);
            });
        });
        // The thread still holds it (not dropped): nothing to call back yet.
        assert!(!cell.call_back());
        drop(away);
        assert!(cell.call_back());
        assert_eq!(cell.home().unwrap().turns, 100_000);
        assert_eq!(cell.parks(), 0);
    }

    #[test]
    fn parks_in_a_row_each_take_the_value_and_a_value_home_is_not_sent_twice() {
        let mut cell = GroupCell::new(Counting { turns: 0, mark: 0 });
        let away = cell.send_away().unwrap();
        assert!(cell.send_away().is_none());
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                let mut away = away;
                while !stop.load(Ordering::Relaxed) {
                    away.turn().unwrap().turns += 1;
                }
                away.yields()
            });
            for round in 1..=50 {
                cell.park();
                let g = cell.home_mut().unwrap();
                g.mark = round;
                cell.unpark();
            }
            stop.store(true, Ordering::Relaxed);
            let yields = t.join().unwrap();
            assert!(yields >= 1 && yields <= 50);
        });
        // Parks that found the value waiting (the thread had not taken it back yet) count too.
        assert_eq!(cell.parks(), 50);
        assert!(cell.call_back());
        assert_eq!(cell.home().unwrap().mark, 50);
    }
}
