//! JSON text into a `serde_json::Value`, taking every key as a key.
//!
//! `serde_json::Value`'s own deserializer does not: with serde_json's
//! `raw_value` feature on (the gateway reads a node's metadata and locality as
//! raw values), an object whose first key is `$serde_json::private::RawValue`
//! is taken for serde_json's private encoding of a raw value. It then fails
//! unless that key's value is a string, and when it is a string, the whole
//! object is replaced by the JSON that string holds. A key is anybody's to
//! choose (a `Struct` in a resource's metadata, a node's metadata), so content
//! read from outside is parsed here instead.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// `bytes` as one JSON value (and nothing after it but whitespace).
pub fn from_slice(bytes: &[u8]) -> serde_json::Result<Value> {
    parse::<false>(bytes)
}

/// [`from_slice`], refusing an object that holds a key twice (`duplicate
/// key`), as Python's `json_format` does, where serde_json and prost-reflect
/// keep the last. For the fuzz targets' properties.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn from_slice_unique_keys(bytes: &[u8]) -> serde_json::Result<Value> {
    parse::<true>(bytes)
}

fn parse<const UNIQUE_KEYS: bool>(bytes: &[u8]) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let Plain::<UNIQUE_KEYS>(value) = Plain::deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// [`from_slice`] of a string.
pub fn from_str(text: &str) -> serde_json::Result<Value> {
    from_slice(text.as_bytes())
}

/// A `Value` deserialized by [`PlainVisitor`].
struct Plain<const UNIQUE_KEYS: bool>(Value);

impl<'de, const UNIQUE_KEYS: bool> Deserialize<'de> for Plain<UNIQUE_KEYS> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(PlainVisitor::<UNIQUE_KEYS>)
            .map(Plain)
    }
}

/// What `Value`'s visitor does, less its private keys; with `UNIQUE_KEYS`,
/// a key twice in one object is an error.
struct PlainVisitor<const UNIQUE_KEYS: bool>;

impl<'de, const UNIQUE_KEYS: bool> Visitor<'de> for PlainVisitor<UNIQUE_KEYS> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // JSON text holds no NaN or infinity: never `Null` here.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        Plain::<UNIQUE_KEYS>::deserialize(deserializer).map(|Plain(v)| v)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(Plain::<UNIQUE_KEYS>(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some((key, Plain::<UNIQUE_KEYS>(value))) = map.next_entry()? {
            if UNIQUE_KEYS && object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("duplicate key `{key}`")));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN_KEY: &str = "$serde_json::private::RawValue";

    #[test]
    fn serde_jsons_private_key_is_a_key_like_any_other() {
        // What `Value`'s own deserializer does with it (why this module is).
        let number = format!(r#"{{"{TOKEN_KEY}": 33.5}}"#);
        assert!(serde_json::from_str::<Value>(&number).is_err());
        let alone = format!(r#"{{"{TOKEN_KEY}": "[1,2]"}}"#);
        assert_eq!(
            serde_json::from_str::<Value>(&alone).unwrap(),
            serde_json::json!([1, 2]),
            "the object replaced by the JSON its string holds"
        );
        let string = format!(r#"{{"{TOKEN_KEY}": "[1,2]", "b": 1}}"#);
        assert!(serde_json::from_str::<Value>(&string).is_err());
        // Here: an object of two keys, as written.
        let v = from_str(&number).unwrap();
        assert_eq!(v[TOKEN_KEY], serde_json::json!(33.5));
        assert_eq!(from_str(&alone).unwrap()[TOKEN_KEY], "[1,2]");
        let v = from_str(&string).unwrap();
        assert_eq!(v.as_object().map(Map::len), Some(2));
        assert_eq!(v[TOKEN_KEY], "[1,2]");
        // And it serializes back as it came.
        assert_eq!(from_str(&serde_json::to_string(&v).unwrap()).unwrap(), v);
    }

    #[test]
    fn unique_keys_refuses_a_key_twice_at_any_depth() {
        for twice in [r#"{"a":1,"a":2}"#, r#"[{"b":{"a":1,"a":1}}]"#] {
            let err = from_slice_unique_keys(twice.as_bytes()).unwrap_err();
            assert!(err.to_string().contains("duplicate key `a`"), "{err}");
            assert!(from_slice(twice.as_bytes()).is_ok(), "the last one wins");
        }
        let once = br#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#;
        assert_eq!(
            from_slice_unique_keys(once).unwrap(),
            from_slice(once).unwrap()
        );
    }

    #[test]
    fn parses_what_value_parses_the_same() {
        let text = r#"{"a":[1,-2,3.25,1e300,18446744073709551615,true,null,"s\u2603"],"b":{"c":{}},"d":[]}"#;
        assert_eq!(
            from_str(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        assert!(from_str("{} x").is_err(), "trailing characters");
        assert!(
            from_str(&"[".repeat(200)).is_err(),
            "serde_json's depth limit holds"
        );
    }
}
