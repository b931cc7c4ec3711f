//! Reading the `a{sv}` options of a method: each key has one D-Bus type, and a wrong type or an
//! unknown key is an `InvalidArgument` error that names the key.

use std::collections::{BTreeMap, HashMap};

use zbus::{OwnedVariant, Variant};

use super::error::Error;

/// A dictionary argument (`a{sv}` options, `a{ss}` variables) with the keys a caller gave more
/// than once kept apart. The bus carries a dictionary as a list of entries, so a client can send
/// a key twice; a map would keep one of them silently. [`Dict::refuse_repeated`] (and for
/// options [`OptionReader::finish`]) refuses such a call, naming the key. A dictionary inside
/// an option's variant (`dict`, `string_map`) is read by zbus, which keeps the last of a key
/// given twice there.
#[derive(Debug)]
pub struct Dict<V> {
    map: HashMap<String, V>,
    /// The keys given more than once, each once, in the order they were seen again.
    repeated: Vec<String>,
}

/// A method's options.
pub type Options = Dict<OwnedVariant>;

impl<V> Default for Dict<V> {
    fn default() -> Self {
        Dict {
            map: HashMap::new(),
            repeated: Vec::new(),
        }
    }
}

impl<V> Dict<V> {
    /// An empty dictionary.
    pub fn new() -> Self {
        Self::default()
    }

    /// `InvalidArgument` naming the keys given more than once (`what`: the method and the
    /// argument, as "SetEnvironment: `env`"); `Ok` when each came once.
    pub fn refuse_repeated(&self, what: &str) -> Result<(), Error> {
        if self.repeated.is_empty() {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "{what}: {} given more than once; give each once",
            name_keys(self.repeated.iter().map(String::as_str))
        )))
    }

    /// The entries, as a map.
    pub fn into_map(self) -> HashMap<String, V> {
        self.map
    }
}

/// The most keys an error names; the rest are counted.
const KEYS_NAMED: usize = 10;

/// `keys` quoted and escaped, at most [`KEYS_NAMED`] of them, then how many more (a call with
/// twenty thousand unknown keys got an error of 200 KB).
fn name_keys<'k>(keys: impl ExactSizeIterator<Item = &'k str>) -> String {
    let n = keys.len();
    let mut named: Vec<String> = keys
        .take(KEYS_NAMED)
        .map(|k| format!("`{}`", crate::text::escape(k, false)))
        .collect();
    if n > KEYS_NAMED {
        named.push(format!("and {} more", n - KEYS_NAMED));
    }
    named.join(", ")
}

impl<V> std::ops::Deref for Dict<V> {
    type Target = HashMap<String, V>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl<V> std::ops::DerefMut for Dict<V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

impl<V> From<HashMap<String, V>> for Dict<V> {
    fn from(map: HashMap<String, V>) -> Self {
        Dict {
            map,
            repeated: Vec::new(),
        }
    }
}

impl<V, const N: usize> From<[(String, V); N]> for Dict<V> {
    fn from(entries: [(String, V); N]) -> Self {
        HashMap::from(entries).into()
    }
}

impl<V: zbus::Type> zbus::Type for Dict<V> {
    const SIGNATURE: &'static zbus::Signature = <HashMap<String, V> as zbus::Type>::SIGNATURE;
}

impl<V: serde::Serialize> serde::Serialize for Dict<V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.map.serialize(s)
    }
}

impl<'de, V: serde::Deserialize<'de>> serde::Deserialize<'de> for Dict<V> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries<V>(std::marker::PhantomData<V>);
        impl<'de, V: serde::Deserialize<'de>> serde::de::Visitor<'de> for Entries<V> {
            type Value = Dict<V>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a dictionary with string keys")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Dict<V>, A::Error> {
                let mut out = Dict::new();
                while let Some((key, value)) = a.next_entry::<String, V>()? {
                    if out.map.insert(key.clone(), value).is_some() && !out.repeated.contains(&key)
                    {
                        out.repeated.push(key);
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(Entries(std::marker::PhantomData))
    }
}

/// Typed access to options, remembering which keys were read.
pub struct OptionReader<'a> {
    method: &'static str,
    options: &'a Options,
    read: Vec<&'static str>,
}

fn type_error(method: &str, key: &str, want: &str, v: &Variant<'_>) -> Error {
    Error::InvalidArgument(format!(
        "{method}: option `{key}` must be of type `{want}`, got `{}`",
        v.value_signature()
    ))
}

impl<'a> OptionReader<'a> {
    /// A reader over the options of `method`.
    pub fn new(method: &'static str, options: &'a Options) -> Self {
        OptionReader {
            method,
            options,
            read: Vec::new(),
        }
    }

    fn get(&mut self, key: &'static str) -> Option<&'a Variant<'static>> {
        self.read.push(key);
        self.options.get(key).map(|v| &**v)
    }

    /// A string (`s`).
    pub fn string(&mut self, key: &'static str) -> Result<Option<String>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Variant::Str(s)) => Ok(Some(s.as_str().to_owned())),
            Some(v) => Err(type_error(self.method, key, "s", v)),
        }
    }

    /// A boolean (`b`).
    pub fn boolean(&mut self, key: &'static str) -> Result<Option<bool>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Variant::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(type_error(self.method, key, "b", v)),
        }
    }

    /// An amount (`d`); any integer type is taken too (`busctl` users type `d 5` or `u 5`).
    pub fn number(&mut self, key: &'static str) -> Result<Option<f64>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Variant::F64(d)) => Ok(Some(*d)),
            Some(Variant::U8(n)) => Ok(Some(f64::from(*n))),
            Some(Variant::U16(n)) => Ok(Some(f64::from(*n))),
            Some(Variant::U32(n)) => Ok(Some(f64::from(*n))),
            Some(Variant::U64(n)) => Ok(Some(*n as f64)),
            Some(Variant::I16(n)) => Ok(Some(f64::from(*n))),
            Some(Variant::I32(n)) => Ok(Some(f64::from(*n))),
            Some(Variant::I64(n)) => Ok(Some(*n as f64)),
            Some(v) => Err(type_error(self.method, key, "d", v)),
        }
    }

    /// A count of seconds: any unsigned integer type, or a signed one that is not negative.
    pub fn seconds(&mut self, key: &'static str) -> Result<Option<u64>, Error> {
        self.unsigned(key, "u")
    }

    /// A count of bytes (`t`): any unsigned integer type, or a signed one that is not negative.
    pub fn bytes(&mut self, key: &'static str) -> Result<Option<u64>, Error> {
        self.unsigned(key, "t")
    }

    /// An unsigned number; `want` names the type in the error.
    fn unsigned(&mut self, key: &'static str, want: &str) -> Result<Option<u64>, Error> {
        let method = self.method;
        let negative =
            || Error::InvalidArgument(format!("{method}: option `{key}` must not be negative"));
        match self.get(key) {
            None => Ok(None),
            Some(Variant::U8(n)) => Ok(Some(u64::from(*n))),
            Some(Variant::U16(n)) => Ok(Some(u64::from(*n))),
            Some(Variant::U32(n)) => Ok(Some(u64::from(*n))),
            Some(Variant::U64(n)) => Ok(Some(*n)),
            Some(Variant::I16(n)) => u64::try_from(*n).map(Some).map_err(|_| negative()),
            Some(Variant::I32(n)) => u64::try_from(*n).map(Some).map_err(|_| negative()),
            Some(Variant::I64(n)) => u64::try_from(*n).map(Some).map_err(|_| negative()),
            Some(v) => Err(Error::InvalidArgument(format!(
                "{method}: option `{key}` must be a whole number that is not negative, of type \
                 `{want}` (any integer type is taken), got `{}`",
                v.value_signature()
            ))),
        }
    }

    /// A list of strings (`as`).
    pub fn strings(&mut self, key: &'static str) -> Result<Option<Vec<String>>, Error> {
        let method = self.method;
        let Some(owned) = self.options.get(key) else {
            self.read.push(key);
            return Ok(None);
        };
        self.read.push(key);
        let bad = || type_error(method, key, "as", owned);
        let copy = owned.try_clone().map_err(|_| bad())?;
        let list: Vec<String> = Vec::try_from(copy).map_err(|_| bad())?;
        Ok(Some(list))
    }

    /// A string-to-string dictionary (`a{ss}`).
    pub fn string_map(
        &mut self,
        key: &'static str,
    ) -> Result<Option<BTreeMap<String, String>>, Error> {
        let method = self.method;
        let Some(owned) = self.options.get(key) else {
            self.read.push(key);
            return Ok(None);
        };
        self.read.push(key);
        let bad = || type_error(method, key, "a{ss}", owned);
        let copy = owned.try_clone().map_err(|_| bad())?;
        let map: HashMap<String, String> = HashMap::try_from(copy).map_err(|_| bad())?;
        Ok(Some(map.into_iter().collect()))
    }

    /// A dictionary of options (`a{sv}`), read in turn with an [`OptionReader`] of its own.
    pub fn dict(&mut self, key: &'static str) -> Result<Option<Options>, Error> {
        let method = self.method;
        self.read.push(key);
        let Some(owned) = self.options.get(key) else {
            return Ok(None);
        };
        let bad = || type_error(method, key, "a{sv}", owned);
        let copy = owned.try_clone().map_err(|_| bad())?;
        let map: HashMap<String, zbus::OwnedVariant> =
            HashMap::try_from(copy).map_err(|_| bad())?;
        Ok(Some(map.into()))
    }

    /// Fails on a key given more than once (naming it) and on keys no getter asked for, naming
    /// them and the known ones.
    pub fn finish(self) -> Result<(), Error> {
        self.options
            .refuse_repeated(&format!("{}: option(s)", self.method))?;
        let mut unknown: Vec<&str> = self
            .options
            .keys()
            .map(String::as_str)
            .filter(|k| !self.read.contains(k))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        unknown.sort();
        let known = if self.read.is_empty() {
            format!("{} takes no options", self.method)
        } else {
            format!("known options: {}", self.read.join(", "))
        };
        Err(Error::InvalidArgument(format!(
            "{}: unknown option(s) {}; {known}",
            self.method,
            name_keys(unknown.into_iter()),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown_option_error(read: &[&'static str]) -> String {
        let options = Options::from([("colour\n".to_owned(), OwnedVariant::from(true))]);
        let mut r = OptionReader::new("Send", &options);
        for key in read {
            r.string(key).unwrap();
        }
        match r.finish() {
            Err(Error::InvalidArgument(text)) => text,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_method_without_options_says_so() {
        let text = unknown_option_error(&[]);
        assert_eq!(
            text,
            "Send: unknown option(s) `colour\\n`; Send takes no options"
        );
    }

    #[test]
    fn a_method_with_options_lists_them() {
        let text = unknown_option_error(&["name", "cwd"]);
        assert!(text.ends_with("; known options: name, cwd"), "{text}");
    }

    /// A hostile run sent twenty thousand unknown keys and got an error of 200 KB back.
    #[test]
    fn an_error_names_ten_keys_and_counts_the_rest() {
        let options: Options = (0..25)
            .map(|i| (format!("k{i:02}"), OwnedVariant::from(true)))
            .collect::<HashMap<_, _>>()
            .into();
        let Err(Error::InvalidArgument(text)) = OptionReader::new("Send", &options).finish() else {
            panic!("refused");
        };
        assert!(text.contains("`k09`, and 15 more;"), "{text}");
        assert!(!text.contains("k10"), "{text}");
    }
}
