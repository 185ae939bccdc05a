//! The gateway's allocator: mimalloc, asked for alignment only when a layout needs more than
//! every mimalloc block has, and tuned to give freed memory back soon.
//!
//! The `mimalloc` crate's `GlobalAlloc` passes every layout to `mi_malloc_aligned`. In
//! mimalloc 3 that takes the plain fast path only when a free block of the size class happens
//! to sit at the asked alignment, and for a size whose class is not a power of two (a 200-byte
//! buffer, an 80-byte future) it over-allocates by the alignment and adjusts: about a tenth of
//! a proxied call's instructions went to the allocator, half of them to these slow paths
//! (BENCHMARKS.md, issue 36 item 7). Every mimalloc block of 16 bytes or more is 16-aligned,
//! and smaller ones are aligned to their size class (8 or 16: `alloc.c`'s
//! `_mi_page_malloc_zero` asserts it), the guarantee C's `malloc` gives and Rust's own `System`
//! allocator relies on in the same way: a layout whose alignment is at most 16 and at most its
//! size is served by `mi_malloc`, anything else by `mi_malloc_aligned`. Both are freed by
//! `mi_free`.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// mimalloc's `MI_MAX_ALIGN_SIZE` (`types.h`): the alignment of every block of at least this
/// size, on every platform it builds for.
const PLAIN_ALIGN: usize = 16;

pub struct Allocator;

/// Whether a plain allocation of `size` bytes is aligned to `align`.
#[inline]
fn plain_fits(size: usize, align: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

// SAFETY: every pointer handed out comes from mimalloc with at least the layout's size and
// alignment (see the module's comment), and is freed or resized by mimalloc, which accepts
// any block it allocated, aligned or not.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's allocation functions take any size and a power-of-two alignment.
        unsafe {
            if plain_fits(layout.size(), layout.align()) {
                mi::mi_malloc(layout.size()) as *mut u8
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe {
            if plain_fits(layout.size(), layout.align()) {
                mi::mi_zalloc(layout.size()) as *mut u8
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, so from mimalloc.
        unsafe { mi::mi_free(ptr as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator; the new block keeps the layout's alignment
        // (plain when the new size guarantees it, asked for otherwise).
        unsafe {
            if plain_fits(new_size, layout.align()) {
                mi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8
            } else {
                mi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
            }
        }
    }
}

/// How long freed memory stays with mimalloc before it goes back to the system. mimalloc 3
/// keeps it a second (its `purge_delay` default, 1000 ms; mimalloc 2 kept it 10 ms): a listing
/// of a large API description frees tens of megabytes at once, and for that second the replica
/// holds them as if they were in use (the kube-apiserver's documents: about 50 MiB more right
/// after a first listing, BENCHMARKS.md "Many tools"). The request path reuses what it frees
/// within milliseconds, so 10 ms costs it nothing measurable (same place).
const PURGE_DELAY_MS: std::ffi::c_long = 10;
/// `mi_option_purge_delay` in mimalloc 3's `mimalloc.h` (the Rust bindings name no constant
/// for it; a test checks it is the option whose default is 1000 ms).
const PURGE_DELAY: mi::mi_option_t = 15;

pub fn tune() {
    // SAFETY: mi_option_set only stores an integer option, for any option index and value.
    unsafe { mi::mi_option_set(PURGE_DELAY, PURGE_DELAY_MS) };
}

/// Gives what this thread has freed back to the system now. The first config is loaded on the
/// thread that runs `main`'s future, which then mostly waits: what compiling the config's
/// OpenAPI documents freed (their parsed trees: about 25 MiB for the kube-apiserver's) would
/// stay with that idle thread, purge delay or not.
pub fn give_back_freed_memory() {
    // SAFETY: mi_collect frees and purges what the calling thread's heap holds unused.
    unsafe { mi::mi_collect(true) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `PURGE_DELAY` is mimalloc 3's purge delay: the option whose default is 1000 ms (no
    /// other option of that version defaults to 1000), and setting it takes.
    #[test]
    fn the_purge_delay_option_is_the_one_tuned() {
        // SAFETY: reading and storing integer options.
        let default = unsafe { mi::mi_option_get(PURGE_DELAY) };
        assert_eq!(default, 1000, "not mimalloc 3's purge_delay");
        tune();
        let tuned = unsafe { mi::mi_option_get(PURGE_DELAY) };
        assert_eq!(tuned, PURGE_DELAY_MS);
    }

    /// Every layout gets a block at its alignment, through both paths and through every
    /// function: sizes across mimalloc's small, medium and large classes (powers of two and
    /// not), alignments from 1 to a page, zeroed blocks zero, and a resized block keeping its
    /// alignment and its bytes. Many blocks of each layout are held at once, so the free lists
    /// hand out blocks from many places in their pages (one block at a time would get the same
    /// block back every time).
    #[test]
    fn every_block_is_at_its_layouts_alignment() {
        let sizes = (1..=40)
            .chain([
                47, 48, 63, 64, 80, 96, 100, 127, 200, 333, 1000, 1024, 1500, 4000,
            ])
            .chain([4096, 5000, 70_000, 300_000, 2_000_000]);
        let sizes: Vec<usize> = sizes.collect();
        for &size in &sizes {
            for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
                let layout = Layout::from_size_align(size, align).expect("a valid layout");
                let count = if size > 100_000 { 4 } else { 64 };
                let mut held = Vec::with_capacity(count);
                for i in 0..count {
                    // SAFETY: a layout of non-zero size; each block freed below.
                    let p = unsafe {
                        if i % 2 == 0 {
                            Allocator.alloc(layout)
                        } else {
                            Allocator.alloc_zeroed(layout)
                        }
                    };
                    assert!(!p.is_null(), "{layout:?}");
                    assert_eq!(p as usize % align, 0, "{layout:?} at {p:p}");
                    if i % 2 == 1 {
                        // SAFETY: `size` bytes were just allocated at `p`.
                        let bytes = unsafe { std::slice::from_raw_parts(p, size) };
                        assert!(bytes.iter().all(|b| *b == 0), "{layout:?} not zeroed");
                    }
                    // SAFETY: as above; the first byte is ours to write.
                    unsafe { p.write(i as u8) };
                    held.push(p);
                }
                for (i, p) in held.into_iter().enumerate() {
                    let new_size = sizes[(i * 7 + size) % sizes.len()];
                    // SAFETY: `p` is a live block of `layout`; the resized one is freed with
                    // its own layout.
                    unsafe {
                        let q = Allocator.realloc(p, layout, new_size);
                        assert!(!q.is_null());
                        assert_eq!(q as usize % align, 0, "{layout:?} resized to {new_size}");
                        assert_eq!(q.read(), i as u8, "{layout:?} resized lost its bytes");
                        let resized = Layout::from_size_align(new_size, align).expect("valid");
                        Allocator.dealloc(q, resized);
                    }
                }
            }
        }
    }

    /// The rule the plain path rests on, at its edges.
    #[test]
    fn the_plain_path_is_taken_only_where_mimalloc_guarantees_the_alignment() {
        assert!(plain_fits(8, 8));
        assert!(plain_fits(16, 16));
        assert!(
            plain_fits(24, 16),
            "blocks of 16 bytes or more are 16-aligned"
        );
        assert!(!plain_fits(8, 16), "an 8-byte block is only 8-aligned");
        assert!(!plain_fits(64, 32));
        assert!(plain_fits(1, 1));
    }
}
