//! Relative dataset names (`a/b/c`, the pool's root being `""`): their parents, leaves,
//! depths and common ancestors.

/// The parent of a relative name (`a/b` -> `a`, `a` -> the root `""`).
pub(super) fn parent_of(relative: &str) -> &str {
    relative.rfind('/').map_or("", |index| &relative[..index])
}

/// The last component of a relative name.
pub(super) fn leaf_of(relative: &str) -> &str {
    relative
        .rfind('/')
        .map_or(relative, |index| &relative[index + 1..])
}

/// How many names deep a dataset is (the root 0).
pub(super) fn depth(relative: &str) -> usize {
    if relative.is_empty() {
        0
    } else {
        relative.matches('/').count() + 1
    }
}

/// The nearest dataset at or above both `a` and `b`.
pub(super) fn common_ancestor<'a>(a: &'a str, b: &str) -> &'a str {
    let mut end = 0;
    let mut offset = 0;
    for (left, right) in a.split('/').zip(b.split('/')) {
        if left != right {
            break;
        }
        end = offset + left.len();
        offset = end + 1;
    }
    &a[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(parent_of("a/b/c"), "a/b");
        assert_eq!(parent_of("a"), "");
        assert_eq!(leaf_of("a/b/c"), "c");
        assert_eq!(depth(""), 0);
        assert_eq!(depth("a/b"), 2);
        assert_eq!(common_ancestor("a/b/c", "a/b/d"), "a/b");
        assert_eq!(common_ancestor("a/b", "a/b/d"), "a/b");
        assert_eq!(common_ancestor("a", "b"), "");
        assert_eq!(common_ancestor("", "b"), "");
        assert_eq!(common_ancestor("ab/c", "a/c"), "");
    }
}
