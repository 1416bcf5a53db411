//! What a step decided that other concerns listen to: each slot that ended ([`SlotMoved`]) and
//! each event published. Recorded where it happens, handed to the listeners by the loop
//! (`listeners.rs`), so the code that ends a slot or publishes an event calls none of them.

use halite_protocol::message::Value;

use crate::core::jobs::SlotMoved;

/// Slot ends and events not yet heard by their listeners, in the order they happened.
#[derive(Default)]
pub(crate) struct Hearing {
    moves: Vec<SlotMoved>,
    events: Vec<(String, Value)>,
}

impl Hearing {
    /// A slot ended.
    pub(crate) fn slot_ended(&mut self, moved: SlotMoved) {
        self.moves.push(moved);
    }

    /// An event was published.
    pub(crate) fn event(&mut self, tag: String, data: Value) {
        self.events.push((tag, data));
    }

    /// The slot ends to hand to their listeners.
    pub(crate) fn take_moves(&mut self) -> Vec<SlotMoved> {
        std::mem::take(&mut self.moves)
    }

    /// The events to hand to their listeners.
    pub(crate) fn take_events(&mut self) -> Vec<(String, Value)> {
        std::mem::take(&mut self.events)
    }

    /// Whether nothing waits to be heard.
    pub(crate) fn is_empty(&self) -> bool {
        self.moves.is_empty() && self.events.is_empty()
    }
}
