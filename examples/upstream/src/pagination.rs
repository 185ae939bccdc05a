//! `tools/list` pagination: which slice of the (virtual) tool list a cursor selects, and
//! the next cursor. Pure logic over plain values.

use crate::variants::CursorMode;

/// A slice `[start, end)` of the tool list and the cursor for the page after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub start: usize,
    pub end: usize,
    pub next: Option<String>,
}

/// The cursor does not name a page of this listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidCursor;

/// Mixed into offsets so cursors look opaque (clients must not parse them).
const MASK: u64 = 0x5eed_c0de;

/// The opaque cursor for the page starting at `offset`.
pub fn encode(offset: usize) -> String {
    format!("c{:x}", offset as u64 ^ MASK)
}

fn decode(cursor: &str) -> Result<usize, InvalidCursor> {
    let hex = cursor.strip_prefix('c').ok_or(InvalidCursor)?;
    let raw = u64::from_str_radix(hex, 16).map_err(|_| InvalidCursor)?;
    usize::try_from(raw ^ MASK).map_err(|_| InvalidCursor)
}

/// Selects the page for `cursor` from a list of `total` tools.
///
/// `size: None` means "not paginated": one page with everything, and any cursor is invalid.
/// In [`CursorMode::Endless`] the list is unbounded and `total` is ignored.
pub fn paginate(
    mode: CursorMode,
    size: Option<usize>,
    total: usize,
    cursor: Option<&str>,
) -> Result<Page, InvalidCursor> {
    let Some(size) = size else {
        return match cursor {
            None => Ok(Page {
                start: 0,
                end: total,
                next: None,
            }),
            Some(_) => Err(InvalidCursor),
        };
    };
    let first = size.min(total);
    match mode {
        CursorMode::Normal => {
            let start = cursor.map_or(Ok(0), decode)?;
            if start > total {
                return Err(InvalidCursor);
            }
            let end = start.saturating_add(size).min(total);
            let next = (end < total).then(|| encode(end));
            Ok(Page { start, end, next })
        }
        CursorMode::Repeat => match cursor {
            None => Ok(Page {
                start: 0,
                end: first,
                next: Some(encode(size)),
            }),
            Some(c) => {
                decode(c)?;
                let end = size.saturating_mul(2).min(total);
                Ok(Page {
                    start: first,
                    end,
                    next: Some(c.to_owned()),
                })
            }
        },
        CursorMode::Endless => {
            let start = cursor.map_or(Ok(0), decode)?;
            let end = start.checked_add(size).ok_or(InvalidCursor)?;
            Ok(Page {
                start,
                end,
                next: Some(encode(end)),
            })
        }
        CursorMode::Empty => match cursor {
            None => Ok(Page {
                start: 0,
                end: first,
                next: Some(String::new()),
            }),
            Some("") => Ok(Page {
                start: first,
                end: total,
                next: None,
            }),
            Some(_) => Err(InvalidCursor),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Follows cursors from the first page, at most `max_pages` pages.
    fn walk(mode: CursorMode, size: Option<usize>, total: usize, max_pages: usize) -> Vec<Page> {
        let mut pages = Vec::new();
        let mut cursor: Option<String> = None;
        while pages.len() < max_pages {
            let page = paginate(mode, size, total, cursor.as_deref()).unwrap();
            cursor = page.next.clone();
            pages.push(page);
            if cursor.is_none() {
                break;
            }
        }
        pages
    }

    #[test]
    fn unpaginated_is_one_page() {
        assert_eq!(
            walk(CursorMode::Normal, None, 6, 10),
            vec![Page {
                start: 0,
                end: 6,
                next: None
            }]
        );
        assert_eq!(
            paginate(CursorMode::Normal, None, 6, Some("c0")),
            Err(InvalidCursor)
        );
    }

    #[test]
    fn normal_walk_covers_everything_once() {
        let pages = walk(CursorMode::Normal, Some(2), 5, 10);
        let ranges: Vec<_> = pages.iter().map(|p| (p.start, p.end)).collect();
        assert_eq!(ranges, vec![(0, 2), (2, 4), (4, 5)]);
        assert!(pages[2].next.is_none());
        // exact multiple: no empty trailing page
        assert_eq!(walk(CursorMode::Normal, Some(3), 6, 10).len(), 2);
    }

    #[test]
    fn cursors_are_opaque_and_validated() {
        let c = encode(4);
        assert_ne!(c, "4");
        assert_eq!(decode(&c), Ok(4));
        for bad in ["", "4", "cxyz", "c", "d1"] {
            assert_eq!(
                paginate(CursorMode::Normal, Some(2), 5, Some(bad)),
                Err(InvalidCursor),
                "{bad}"
            );
        }
        // beyond the end
        assert_eq!(
            paginate(CursorMode::Normal, Some(2), 5, Some(&encode(9))),
            Err(InvalidCursor)
        );
    }

    #[test]
    fn repeat_returns_the_same_cursor_forever() {
        let pages = walk(CursorMode::Repeat, Some(2), 6, 5);
        assert_eq!(pages.len(), 5);
        assert_eq!((pages[1].start, pages[1].end), (2, 4));
        assert_eq!(pages[1].next, pages[0].next);
        assert_eq!(pages[4].next, pages[0].next);
    }

    #[test]
    fn endless_never_ends_and_never_repeats() {
        let pages = walk(CursorMode::Endless, Some(3), 2, 50);
        assert_eq!(pages.len(), 50);
        assert_eq!((pages[49].start, pages[49].end), (147, 150));
        let mut cursors: Vec<_> = pages.iter().map(|p| p.next.clone()).collect();
        cursors.dedup();
        assert_eq!(cursors.len(), 50);
    }

    #[test]
    fn empty_string_is_a_real_cursor() {
        let pages = walk(CursorMode::Empty, Some(2), 6, 10);
        assert_eq!(pages.len(), 2);
        assert_eq!(pages[0].next.as_deref(), Some(""));
        assert_eq!(
            (pages[1].start, pages[1].end, pages[1].next.clone()),
            (2, 6, None)
        );
        assert_eq!(
            paginate(CursorMode::Empty, Some(2), 6, Some("c1")),
            Err(InvalidCursor)
        );
    }
}
