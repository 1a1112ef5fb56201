//! A dictionary a store learns from its own first writes.
//!
//! Training a dictionary by hand (`sessionpack dictionary train`) needs a
//! sample of the app's sessions before the app runs with the store. A
//! store told to learn needs nothing: each process keeps the data of its
//! first writes, trains on them, and offers the result to the namespace
//! under the learned id with `SET NX GET`. The first process to get there
//! stores its dictionary; every other one adopts what it finds there
//! (then, or when it opens, or when it reads a record packed with it), so
//! a fleet packs with one dictionary. Until then a process writes records
//! as they come, which stay readable as they are.

use serde::{Deserialize, Serialize};

use super::Dictionary;

/// How a compact store learns the dictionary it packs with
/// ([`crate::session::layout::compact::CompactConfig::learn_dictionary`];
/// feature `compression`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Learning {
    /// The id the learned dictionary takes in the namespace, default 255.
    /// Every process of the namespace names the same one; a new id
    /// learns anew (a retired dictionary stays readable while stored).
    pub id: u8,
    /// Records whose data could be packed (24 bytes or more) a process
    /// writes before it trains, default 1000 (at most
    /// [`super::MAX_LEARNING_SAMPLES`]). They stay as written.
    pub samples: usize,
    /// The dictionary's largest size in bytes, default 16 KiB
    /// ([`super::MIN_DICTIONARY_BYTES`] to [`super::MAX_DICTIONARY_BYTES`]).
    pub max_bytes: usize,
}

impl Default for Learning {
    fn default() -> Self {
        Self {
            id: 255,
            samples: 1000,
            max_bytes: 16 * 1024,
        }
    }
}

/// The most of one record's data kept as a sample: a dictionary is made
/// of what records share, which a prefix this long shows.
const SAMPLE_BYTES: usize = 4096;

/// Where a learning process stands.
enum State {
    /// Keeping samples until it has enough.
    Collecting(Vec<Vec<u8>>),
    /// One call is training or publishing; the others write as they come.
    Busy,
    /// Trained, but the namespace could not be reached: the next write
    /// offers it again.
    Trained(Dictionary),
    /// Packing with the namespace's dictionary, or given up.
    Done,
}

/// What the call that [`Learner::offer`] chose does next.
pub(crate) enum Work {
    /// Train on these samples and offer the dictionary.
    Train(Vec<Vec<u8>>),
    /// Offer this dictionary again.
    Publish(Dictionary),
}

/// A process's learning: its samples, and who trains.
pub(crate) struct Learner {
    config: Learning,
    state: std::sync::Mutex<State>,
}

impl Learner {
    pub(crate) fn new(config: Learning) -> Self {
        Self {
            state: std::sync::Mutex::new(State::Collecting(Vec::with_capacity(config.samples))),
            config,
        }
    }

    pub(crate) fn config(&self) -> &Learning {
        &self.config
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `data` as a sample; once there are enough, or a trained
    /// dictionary waits to be stored, hands the work to this caller alone.
    pub(crate) fn offer(&self, data: &[u8]) -> Option<Work> {
        let mut state = self.state();
        match &mut *state {
            State::Collecting(samples) => {
                samples.push(data[..data.len().min(SAMPLE_BYTES)].to_vec());
                if samples.len() < self.config.samples {
                    return None;
                }
                let State::Collecting(samples) = std::mem::replace(&mut *state, State::Busy) else {
                    unreachable!("matched above")
                };
                Some(Work::Train(samples))
            }
            State::Trained(_) => {
                let State::Trained(dictionary) = std::mem::replace(&mut *state, State::Busy) else {
                    unreachable!("matched above")
                };
                Some(Work::Publish(dictionary))
            }
            State::Busy | State::Done => None,
        }
    }

    /// The work ended: packing with a dictionary, or given up.
    pub(crate) fn done(&self) {
        *self.state() = State::Done;
    }

    /// The namespace was not reached: offer `dictionary` on a later write.
    pub(crate) fn retry(&self, dictionary: Dictionary) {
        let mut state = self.state();
        if matches!(*state, State::Busy) {
            *state = State::Trained(dictionary);
        }
    }

    /// Whether it still keeps samples (for the tests).
    #[cfg(test)]
    fn collecting(&self) -> bool {
        matches!(*self.state(), State::Collecting(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_caller_gets_the_work_and_a_failed_publish_comes_back() {
        let learner = Learner::new(Learning {
            samples: 3,
            ..Learning::default()
        });
        assert!(learner.offer(b"one").is_none());
        assert!(learner.offer(b"two").is_none());
        let Some(Work::Train(samples)) = learner.offer(&[7; SAMPLE_BYTES + 10]) else {
            panic!("the third sample starts the training")
        };
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[2].len(), SAMPLE_BYTES, "samples are capped");
        // While one call trains, the others neither wait nor train.
        assert!(learner.offer(b"four").is_none());
        assert!(!learner.collecting());
        let dictionary = Dictionary::new(255, vec![1u8; 64]).unwrap();
        learner.retry(dictionary.clone());
        let Some(Work::Publish(again)) = learner.offer(b"five") else {
            panic!("a dictionary not stored is offered again")
        };
        assert_eq!(again, dictionary);
        learner.done();
        assert!(learner.offer(b"six").is_none());
        learner.retry(dictionary);
        assert!(learner.offer(b"seven").is_none(), "done stays done");
    }
}
