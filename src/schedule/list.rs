//! The list syntax shared by `daysOfWeek` and `hoursOfDay`: each element is a comma list of
//! items, and each item is a single value or an inclusive range `a-b`.
//!
//! Only the shape lives here; what a value means (a day name, an hour) is up to the caller, so
//! both fields reject the same malformed shapes with the same words.

/// One comma-separated item of an element, with surrounding whitespace removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Item<'a> {
    /// A single value, e.g. `mon` or `9`.
    Single(&'a str),
    /// An inclusive range, e.g. `mon-fri` or `22-6` (sides trimmed).
    Range(&'a str, &'a str),
}

/// What is wrong with the shape of an element, and the text to quote back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape<'a> {
    /// The whole element is empty or blank.
    EmptyElement,
    /// An item between commas is empty, e.g. the middle of `mon,,tue`.
    EmptyItem,
    /// A range without a start or an end, or with more than one `-` (e.g. `9-`, `mon-wed-fri`).
    MalformedRange(&'a str),
}

impl Shape<'_> {
    /// The token to quote back: the malformed range, or the element the empty item sits in.
    pub(crate) fn token<'s>(&'s self, element: &'s str) -> &'s str {
        match self {
            Shape::MalformedRange(item) => item,
            Shape::EmptyElement | Shape::EmptyItem => element,
        }
    }

    /// A human explanation; `example` is a valid range of the caller's kind (e.g. `mon-fri`).
    pub(crate) fn problem(&self, example: &str) -> String {
        match self {
            Shape::EmptyElement => "the element is empty".to_owned(),
            Shape::EmptyItem => "empty item in the comma list".to_owned(),
            Shape::MalformedRange(_) => {
                format!("a range needs exactly one start and one end, like {example}")
            }
        }
    }
}

/// The raw (trimmed) comma items of `element`, without range splitting.
///
/// Callers that must inspect an item before range splitting (hours reject a leading sign, so
/// `-5` is reported as a sign rather than a range without a start) use this.
pub(crate) fn raw_items(element: &str) -> Result<Vec<&str>, Shape<'static>> {
    if element.trim().is_empty() {
        return Err(Shape::EmptyElement);
    }
    element
        .split(',')
        .map(str::trim)
        .map(|item| {
            if item.is_empty() {
                Err(Shape::EmptyItem)
            } else {
                Ok(item)
            }
        })
        .collect()
}

/// Splits one trimmed item into a single value or a range.
pub(crate) fn split_item(item: &str) -> Result<Item<'_>, Shape<'_>> {
    let Some((start, end)) = item.split_once('-') else {
        return Ok(Item::Single(item));
    };
    let (start, end) = (start.trim(), end.trim());
    if start.is_empty() || end.is_empty() || end.contains('-') {
        return Err(Shape::MalformedRange(item));
    }
    Ok(Item::Range(start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_trimmed_and_ranges_split() {
        assert_eq!(raw_items(" mon , tue-wed ").unwrap(), vec!["mon", "tue-wed"]);
        assert_eq!(split_item("mon").unwrap(), Item::Single("mon"));
        assert_eq!(split_item("mon - fri").unwrap(), Item::Range("mon", "fri"));
    }

    #[test]
    fn malformed_shapes_are_rejected() {
        assert_eq!(raw_items(""), Err(Shape::EmptyElement));
        assert_eq!(raw_items("   "), Err(Shape::EmptyElement));
        assert_eq!(raw_items("mon,,tue"), Err(Shape::EmptyItem));
        assert_eq!(raw_items("mon,"), Err(Shape::EmptyItem));
        assert_eq!(split_item("9-"), Err(Shape::MalformedRange("9-")));
        assert_eq!(split_item("-5"), Err(Shape::MalformedRange("-5")));
        assert_eq!(split_item("mon-wed-fri"), Err(Shape::MalformedRange("mon-wed-fri")));
        assert_eq!(split_item("9--5"), Err(Shape::MalformedRange("9--5")));
    }
}
