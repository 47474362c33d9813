//! The reference's `canonicalize` over a host's own values, for values that JSON text
//! cannot carry faithfully: a hole in a sparse array (the reference renders `[1,,3]`), an
//! object with a `toJSON` (never honoured), a boxed primitive (an object, whose own keys
//! are its indices), a function or symbol inside an array (an error), a `NaN` (an error
//! with the reference's message).
//!
//! A host (napi-rs, wasm-bindgen) implements [`HostValue`] over its engine's values, so it
//! answers only what the algorithm asks (`typeof`, `Array.isArray`, `Object.keys`, a
//! property), and the algorithm itself, its order and its error messages, exist here once.
//! A host error (a getter that throws, a proxy trap) ends the walk and is returned as is.

use std::fmt;

use super::{CanonicalError, JsText, MAX_JSON_DEPTH, write_finite_f64};

/// What a host value is, as the algorithm asks: `typeof`, with `null` and arrays told apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HostKind {
    /// `null`.
    Null,
    /// `undefined`.
    Undefined,
    /// A boolean.
    Bool(bool),
    /// A number (any double, NaN included).
    Number(f64),
    /// A string ([`HostValue::text`] reads it).
    String,
    /// A bigint.
    BigInt,
    /// A function.
    Function,
    /// A symbol.
    Symbol,
    /// An array (`Array.isArray`).
    Array,
    /// Any other object (boxed primitives, dates and maps included).
    Object,
}

impl HostKind {
    /// The `typeof` of a kind the algorithm does not serialize.
    fn type_name(self) -> &'static str {
        match self {
            HostKind::Undefined => "undefined",
            HostKind::BigInt => "bigint",
            HostKind::Function => "function",
            HostKind::Symbol => "symbol",
            _ => "object",
        }
    }
}

/// A value of the host's engine, as the algorithm reads it.
pub trait HostValue: Sized + Clone {
    /// A property key the host can read a property back with.
    type Key;
    /// A host failure (an exception the engine raised while the value was read).
    type Error;

    /// What the value is.
    fn kind(&self) -> Result<HostKind, Self::Error>;
    /// The value of a [`HostKind::String`].
    fn text(&self) -> Result<JsText<'static>, Self::Error>;
    /// The `length` of a [`HostKind::Array`].
    fn array_length(&self) -> Result<u32, Self::Error>;
    /// Element `index` of an array; `None` for a hole (`!(index in array)`).
    fn element(&self, index: u32) -> Result<Option<Self>, Self::Error>;
    /// `Object.keys(value)`: the own enumerable string keys, with a key to read each back.
    fn keys(&self) -> Result<Vec<(JsText<'static>, Self::Key)>, Self::Error>;
    /// `value[key]`.
    fn get(&self, key: &Self::Key) -> Result<Self, Self::Error>;
    /// Whether two values are the same object (`===`), to find a value inside itself.
    fn same(&self, other: &Self) -> Result<bool, Self::Error>;
}

/// Why a host value has no canonical form.
#[derive(Debug, Clone, PartialEq)]
pub enum HostError<E> {
    /// A number, type or text the reference rejects, with its message.
    Canonical(CanonicalError),
    /// The value contains itself (`Canonical JSON Error: circular structure`, a `TypeError`
    /// in JavaScript).
    Circular,
    /// Arrays and objects nested deeper than [`MAX_JSON_DEPTH`].
    TooDeep,
    /// The host failed while the value was read.
    Host(E),
}

impl<E> From<E> for HostError<E> {
    fn from(e: E) -> Self {
        HostError::Host(e)
    }
}

impl<E> fmt::Display for HostError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::Canonical(e) => e.fmt(f),
            HostError::Circular => f.write_str("Canonical JSON Error: circular structure"),
            HostError::TooDeep => write!(
                f,
                "Canonical JSON Error: nesting deeper than {MAX_JSON_DEPTH} levels (the core's limit for a JSON value)"
            ),
            HostError::Host(_) => f.write_str("the host raised an exception while the value was read"),
        }
    }
}

/// The canonical form of a host value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCanonical {
    /// The reference's canonical text.
    pub text: String,
    /// Whether the text is also JSON (false when it renders a sparse array's hole, which
    /// JSON cannot express, so no store can keep the value).
    pub is_json: bool,
}

/// `canonicalize(value)` over a host value: the reference's algorithm (sorted keys by
/// UTF-16 code units, `undefined`/functions/symbols skipped in objects, `undefined` as
/// `null` in arrays, holes rendered empty, `-0` as `0`, `toJSON` ignored) with its errors.
pub fn canonicalize_host<V: HostValue>(value: &V) -> Result<HostCanonical, HostError<V::Error>> {
    let mut walk = Walk { out: String::new(), is_json: true, path: Vec::new() };
    walk.value(value)?;
    Ok(HostCanonical { text: walk.out, is_json: walk.is_json })
}

struct Walk<V> {
    out: String,
    is_json: bool,
    /// The arrays and objects being written, outermost first.
    path: Vec<V>,
}

impl<V: HostValue> Walk<V> {
    fn value(&mut self, v: &V) -> Result<(), HostError<V::Error>> {
        match v.kind()? {
            HostKind::Null => self.out.push_str("null"),
            HostKind::Bool(b) => self.out.push_str(if b { "true" } else { "false" }),
            HostKind::Number(n) if !n.is_finite() => return Err(HostError::Canonical(CanonicalError::NonFinite(n))),
            HostKind::Number(n) => write_finite_f64(n, &mut self.out),
            HostKind::String => v.text()?.write(&mut self.out),
            HostKind::Array => self.nested(v, true)?,
            HostKind::Object => self.nested(v, false)?,
            other => {
                return Err(HostError::Canonical(CanonicalError::UnsupportedType(other.type_name().to_owned())));
            }
        }
        Ok(())
    }

    fn nested(&mut self, v: &V, array: bool) -> Result<(), HostError<V::Error>> {
        for outer in &self.path {
            if outer.same(v)? {
                return Err(HostError::Circular);
            }
        }
        if self.path.len() >= MAX_JSON_DEPTH {
            return Err(HostError::TooDeep);
        }
        self.path.push(v.clone());
        let written = if array { self.array_members(v) } else { self.object_members(v) };
        self.path.pop();
        written
    }

    /// In the reference's order: each element read, then written (`map`).
    fn array_members(&mut self, v: &V) -> Result<(), HostError<V::Error>> {
        let len = v.array_length()?;
        self.out.push('[');
        for i in 0..len {
            if i > 0 {
                self.out.push(',');
            }
            match v.element(i)? {
                // `map` skips a hole and `join` renders it empty: the reference's `[1,,3]`.
                None => self.is_json = false,
                Some(x) if x.kind()? == HostKind::Undefined => self.out.push_str("null"),
                Some(x) => self.value(&x)?,
            }
        }
        self.out.push(']');
        Ok(())
    }

    /// In the reference's order: the keys sorted, then each value read and written.
    fn object_members(&mut self, v: &V) -> Result<(), HostError<V::Error>> {
        let mut keys = v.keys()?;
        keys.sort_by(|a, b| a.0.cmp_utf16(&b.0));
        self.out.push('{');
        let mut first = true;
        for (name, key) in keys {
            let x = v.get(&key)?;
            if matches!(x.kind()?, HostKind::Undefined | HostKind::Function | HostKind::Symbol) {
                continue;
            }
            if !first {
                self.out.push(',');
            }
            first = false;
            name.write(&mut self.out);
            self.out.push(':');
            self.value(&x)?;
        }
        self.out.push('}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;

    /// A JavaScript-like value: objects and arrays are shared (`Rc`), so a value can contain
    /// itself and identity is pointer identity.
    #[derive(Clone)]
    enum Js {
        Prim(HostKind),
        Str(Vec<u16>),
        Arr(Rc<std::cell::RefCell<Vec<Option<Js>>>>),
        Obj(Rc<std::cell::RefCell<Vec<(String, Js)>>>),
        /// An object whose every property read throws.
        Throwing,
    }

    fn num(n: f64) -> Js {
        Js::Prim(HostKind::Number(n))
    }
    fn s(t: &str) -> Js {
        Js::Str(t.encode_utf16().collect())
    }
    fn arr(items: Vec<Option<Js>>) -> Js {
        Js::Arr(Rc::new(items.into()))
    }
    fn obj(members: Vec<(&str, Js)>) -> Js {
        Js::Obj(Rc::new(members.into_iter().map(|(k, v)| (k.to_owned(), v)).collect::<Vec<_>>().into()))
    }

    impl HostValue for Js {
        type Key = String;
        type Error = String;
        fn kind(&self) -> Result<HostKind, String> {
            Ok(match self {
                Js::Prim(k) => *k,
                Js::Str(_) => HostKind::String,
                Js::Arr(_) => HostKind::Array,
                Js::Obj(_) | Js::Throwing => HostKind::Object,
            })
        }
        fn text(&self) -> Result<JsText<'static>, String> {
            match self {
                Js::Str(u) => Ok(JsText::from_units(u.clone())),
                _ => Err("not a string".into()),
            }
        }
        fn array_length(&self) -> Result<u32, String> {
            match self {
                Js::Arr(a) => Ok(a.borrow().len() as u32),
                _ => Err("not an array".into()),
            }
        }
        fn element(&self, index: u32) -> Result<Option<Js>, String> {
            match self {
                Js::Arr(a) => Ok(a.borrow()[index as usize].clone()),
                _ => Err("not an array".into()),
            }
        }
        fn keys(&self) -> Result<Vec<(JsText<'static>, String)>, String> {
            match self {
                Js::Obj(o) => Ok(o.borrow().iter().map(|(k, _)| (JsText::Text(k.clone().into()), k.clone())).collect()),
                Js::Throwing => Ok(vec![(JsText::Text("x".into()), "x".into())]),
                _ => Err("not an object".into()),
            }
        }
        fn get(&self, key: &String) -> Result<Js, String> {
            match self {
                Js::Obj(o) => Ok(o.borrow().iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).unwrap()),
                _ => Err("getter threw".into()),
            }
        }
        fn same(&self, other: &Js) -> Result<bool, String> {
            Ok(match (self, other) {
                (Js::Arr(a), Js::Arr(b)) => Rc::ptr_eq(a, b),
                (Js::Obj(a), Js::Obj(b)) => Rc::ptr_eq(a, b),
                _ => false,
            })
        }
    }

    fn text(v: &Js) -> String {
        canonicalize_host(v).map(|c| c.text).unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn the_reference_algorithm_over_host_values() {
        let undefined = Js::Prim(HostKind::Undefined);
        let f = Js::Prim(HostKind::Function);
        let v = obj(vec![
            ("b", arr(vec![Some(num(1.0)), None, Some(undefined.clone()), Some(num(-0.0))])),
            ("a", obj(vec![("\u{e000}", num(1.5)), ("😀", s("x")), ("skip", undefined), ("fn", f)])),
            ("c", Js::Prim(HostKind::Null)),
        ]);
        let c = canonicalize_host(&v).unwrap();
        // U+E000 sorts after the astral character (JavaScript's code-unit order).
        assert_eq!(c.text, "{\"a\":{\"😀\":\"x\",\"\u{e000}\":1.5},\"b\":[1,,null,0],\"c\":null}");
        assert!(!c.is_json, "a hole is not JSON");
        assert!(canonicalize_host(&obj(vec![("k", s("v"))])).unwrap().is_json);
    }

    #[test]
    fn a_lone_surrogate_is_escaped_as_json_stringify_writes_it() {
        assert_eq!(text(&Js::Str(vec![0x61, 0xd800])), r#""a\ud800""#);
    }

    #[test]
    fn errors_carry_the_reference_messages() {
        assert_eq!(text(&num(f64::NAN)), "error: Canonical JSON Error: Non-finite number NaN cannot be serialized.");
        assert_eq!(
            text(&Js::Prim(HostKind::Undefined)),
            "error: Canonical JSON Error: Unsupported value type undefined"
        );
        let in_array = arr(vec![Some(Js::Prim(HostKind::Symbol))]);
        assert_eq!(text(&in_array), "error: Canonical JSON Error: Unsupported value type symbol");
        assert_eq!(canonicalize_host(&Js::Throwing).unwrap_err(), HostError::Host("getter threw".to_owned()));
    }

    #[test]
    fn a_value_inside_itself_is_circular_but_a_shared_one_is_not() {
        let shared = obj(vec![("k", num(1.0))]);
        assert_eq!(text(&arr(vec![Some(shared.clone()), Some(shared)])), r#"[{"k":1},{"k":1}]"#);
        let looped = arr(vec![]);
        if let Js::Arr(a) = &looped {
            a.borrow_mut().push(Some(looped.clone()));
        }
        assert_eq!(canonicalize_host(&looped).unwrap_err(), HostError::Circular);
        if let Js::Arr(a) = &looped {
            a.borrow_mut().clear(); // break the cycle so the test does not leak
        }
    }

    #[test]
    fn nesting_deeper_than_the_limit_is_refused() {
        let mut deep = num(1.0);
        for _ in 0..MAX_JSON_DEPTH {
            deep = arr(vec![Some(deep)]);
        }
        assert!(canonicalize_host(&deep).is_ok());
        assert_eq!(canonicalize_host(&arr(vec![Some(deep)])).unwrap_err(), HostError::TooDeep);
    }
}
