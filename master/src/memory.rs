//! Memory a request took is given back when it is done with, refused or not.
//!
//! glibc's malloc serves a large block with its own `mmap` (returned to the system on free) only
//! above a threshold that *grows* each time such a block is freed, up to 32 MiB; after a few
//! large messages every later one comes from the heap, whose freed pages stay with the process.
//! Measured on the master: sixty 4 MB requests refused at once left 55–123 MiB behind, and a
//! slow subscriber's 1 MiB returns about 1 GiB. Fixing the threshold stops it growing, so every
//! block from [`LARGE_BLOCK`] up is mapped on its own and unmapped when freed, and setting the
//! trim threshold returns the top of the heap as soon as a few MiB of it are free.
//!
//! Large messages also arrive as many 64 KiB Noise chunks, which come from the heap: freed in
//! the middle of it, with live allocations above them, no threshold gives them back. A thread of
//! its own therefore asks glibc every [`TRIM_EVERY`] to hand free pages of every arena back
//! (`malloc_trim`, which unmaps them in place): the core never waits for it.

/// Blocks this large or larger are mapped on their own (a message buffer, a return, a batch).
pub const LARGE_BLOCK: usize = 128 * 1024;
/// Free memory at the top of the heap beyond this is given back.
pub const TRIM_ABOVE: usize = 4 * 1024 * 1024;

/// How often free pages in the middle of the heap are given back.
pub const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Sets the allocator's thresholds for the whole process and starts the thread that gives
/// free pages back; call once, at start. Does nothing where the C library is not glibc.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        set_glibc_thresholds();
        let trimming = std::thread::Builder::new().name("halite-trim".into()).spawn(|| loop {
            std::thread::sleep(TRIM_EVERY);
            trim();
        });
        if let Err(error) = trimming {
            tracing::warn!(%error, "no thread to give freed memory back");
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() {
    // SAFETY: malloc_trim takes a plain integer and is safe to call from any thread at any
    // time; glibc locks each arena while it releases its free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn set_glibc_thresholds() {
    let to_int = |n: usize| libc::c_int::try_from(n).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt only sets allocator parameters; it takes plain integers and is called at
    // start-up, before the runtime's threads exist. A refusal (0) leaves glibc's defaults.
    let (mmap, trim) = unsafe {
        (
            libc::mallopt(libc::M_MMAP_THRESHOLD, to_int(LARGE_BLOCK)),
            libc::mallopt(libc::M_TRIM_THRESHOLD, to_int(TRIM_ABOVE)),
        )
    };
    if mmap == 0 || trim == 0 {
        tracing::warn!("the allocator refused its thresholds: freed memory may stay with the process");
    }
}
