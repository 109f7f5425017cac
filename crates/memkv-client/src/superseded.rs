//! Batch puts that name a key more than once. A batch's items travel concurrently (split
//! frames, large values on their own, RDMA writes), so which of two puts of one key lands last
//! would be chance. Only the last valid item with a key is sent: the value stored is the one
//! puts made in order would leave, and the earlier items share its result.

use std::collections::HashMap;

pub(crate) struct Superseded {
    /// For each item, the item whose result it takes: itself when it is sent.
    by: Vec<usize>,
    /// The items sent, in order.
    kept: Vec<usize>,
}

impl Superseded {
    /// `None` when no key repeats, the common case. `keys` yields each item's key, or `None`
    /// for an item the client refuses; a refused item neither replaces nor is replaced.
    pub(crate) fn find<'a>(keys: impl Iterator<Item = Option<&'a [u8]>>) -> Option<Self> {
        let keys: Vec<Option<&[u8]>> = keys.collect();
        if keys.len() < 2 {
            return None;
        }
        let mut last: HashMap<&[u8], usize> = HashMap::with_capacity(keys.len());
        let mut repeated = false;
        for (i, key) in keys.iter().enumerate() {
            if let Some(key) = key {
                repeated |= last.insert(key, i).is_some();
            }
        }
        if !repeated {
            return None;
        }
        let by: Vec<usize> = keys
            .iter()
            .enumerate()
            .map(|(i, key)| key.map_or(i, |key| last[key]))
            .collect();
        let kept = (0..by.len()).filter(|&i| by[i] == i).collect();
        Some(Self { by, kept })
    }

    /// The positions of the items to send, in order.
    pub(crate) fn kept(&self) -> impl Iterator<Item = usize> + '_ {
        self.kept.iter().copied()
    }

    /// One result per item of the whole batch, from the results of the items sent.
    pub(crate) fn spread<T: Clone>(&self, sent: Vec<T>) -> Vec<T> {
        let mut at = vec![0; self.by.len()];
        for (n, &i) in self.kept.iter().enumerate() {
            at[i] = n;
        }
        self.by.iter().map(|&j| sent[at[j]].clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Superseded;

    fn find(keys: &[Option<&str>]) -> Option<Superseded> {
        Superseded::find(keys.iter().map(|k| k.map(str::as_bytes)))
    }

    #[test]
    fn distinct_keys_need_nothing_rearranged() {
        assert!(find(&[Some("a"), Some("b"), None, Some("c")]).is_none());
        assert!(find(&[Some("a")]).is_none());
        assert!(find(&[None, None]).is_none(), "refused items are not keys");
    }

    #[test]
    fn only_the_last_item_of_a_key_is_sent_and_the_others_share_its_result() {
        let s = find(&[Some("k"), Some("x"), None, Some("k"), Some("k"), Some("y")]).unwrap();
        assert_eq!(s.kept().collect::<Vec<_>>(), vec![1, 2, 4, 5]);
        let results = s.spread(vec!["x", "refused", "k", "y"]);
        assert_eq!(results, vec!["k", "x", "refused", "k", "k", "y"]);
    }
}
