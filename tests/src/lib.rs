//! End-to-end tests of halite: real peers and real processes on loopback. The tests live in
//! `tests/tests/`; this library is empty.
