//! Deserializing the internally tagged JSON objects of the store protocol
//! ([`StoreRequest`](crate::StoreRequest) by `op`, [`StoreReply`](crate::StoreReply) by
//! `kind`) without serde's buffering.
//!
//! serde's derive for an internally tagged enum reads the whole object into a buffer before
//! it looks at the tag, because the tag may come anywhere; for a store answer that is every
//! row, read twice. The objects the core and its hosts write have the tag first, so this reads
//! the first key: the tag, then the variant's fields straight from the rest of the object.
//! An object whose tag comes later is read as a JSON value first, written again with the tag
//! first and read the same way, so the result never depends on the order of the keys.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserializer;
use serde::de::{self, MapAccess, Visitor};
use serde_json::Value;

/// An enum written as one JSON object with a tag key naming its variant.
pub(crate) trait Tagged: Sized + serde::de::DeserializeOwned {
    /// The tag's key.
    const TAG: &'static str;
    /// The variants' names, for the error of an unknown one.
    const KINDS: &'static [&'static str];
    /// Variant `kind`, its fields read from `d` (the object's other keys).
    fn variant<'de, D: Deserializer<'de>>(kind: &str, d: D) -> Result<Self, D::Error>;
}

/// Deserializes a [`Tagged`] enum from `d`.
pub(crate) fn deserialize<'de, T: Tagged, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_map(TaggedVisitor(PhantomData))
}

struct TaggedVisitor<T>(PhantomData<T>);

impl<'de, T: Tagged> Visitor<'de> for TaggedVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an object with {:?}", T::TAG)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let Some(first) = map.next_key::<String>()? else {
            return Err(de::Error::missing_field(T::TAG));
        };
        if first == T::TAG {
            let kind: String = map.next_value()?;
            return T::variant(&kind, de::value::MapAccessDeserializer::new(map));
        }
        let mut object = serde_json::Map::new();
        object.insert(first, map.next_value::<Value>()?);
        while let Some((k, v)) = map.next_entry::<String, Value>()? {
            object.insert(k, v);
        }
        let kind = match object.remove(T::TAG) {
            Some(Value::String(kind)) => kind,
            Some(other) => return Err(de::Error::custom(format!("{} must be a string, got {other}", T::TAG))),
            None => return Err(de::Error::missing_field(T::TAG)),
        };
        // Written again with the tag first and read as text: the variants are then read by
        // the one deserializer the fast path uses (reading them from the `Value` as well
        // would compile every variant's fields a second time: the .wasm's size).
        let mut text = String::from("{");
        text.push_str(&Value::String(T::TAG.to_owned()).to_string());
        text.push(':');
        text.push_str(&Value::String(kind).to_string());
        for (k, v) in object {
            text.push(',');
            text.push_str(&Value::String(k).to_string());
            text.push(':');
            text.push_str(&v.to_string());
        }
        text.push('}');
        serde_json::from_str(&text).map_err(de::Error::custom)
    }
}
