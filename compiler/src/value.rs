//! Values of attributes after evaluation, and the arithmetic between them.

use planc_lang::units::{format_quantity, Dimension};

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Number(f64),
    /// In base units (bytes, B/s, seconds, FLOP/s, a fraction).
    Quantity(f64, Dimension),
    Str(String),
    Bool(bool),
    Auto,
    /// A bare identifier that named no attribute: an enumeration value or a GPU name.
    Enum(String),
    List(Vec<Value>),
}

impl Value {
    pub fn describe(&self) -> String {
        match self {
            Value::Number(n) => format!("the number {}", fmt_num(*n)),
            Value::Quantity(v, d) => format!("the {} {}", d.name(), format_quantity(*v, *d)),
            Value::Str(s) => format!("the string \"{s}\""),
            Value::Bool(b) => format!("`{b}`"),
            Value::Auto => "`auto`".into(),
            Value::Enum(e) => format!("`{e}`"),
            Value::List(_) => "a list".into(),
        }
    }
}

pub fn fmt_num(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// Arithmetic with dimensions: sizes add to sizes, a count scales a quantity, a quantity
/// over one of the same dimension is a plain number. Anything else is an error message.
pub fn arith(op: ArithOp, a: &Value, b: &Value) -> Result<Value, String> {
    use Value::*;
    let r = match (op, a, b) {
        (_, Number(x), Number(y)) => Number(num_op(op, *x, *y)?),
        (ArithOp::Add | ArithOp::Sub, Quantity(x, d), Quantity(y, e)) if d == e => {
            Quantity(num_op(op, *x, *y)?, *d)
        }
        (ArithOp::Mul, Quantity(x, d), Number(y)) | (ArithOp::Mul, Number(y), Quantity(x, d)) => {
            Quantity(x * y, *d)
        }
        (ArithOp::Div, Quantity(x, d), Number(y)) => Quantity(num_op(op, *x, *y)?, *d),
        (ArithOp::Div, Quantity(x, d), Quantity(y, e)) if d == e => Number(num_op(op, *x, *y)?),
        _ => {
            let sym = match op {
                ArithOp::Add => "+",
                ArithOp::Sub => "-",
                ArithOp::Mul => "*",
                ArithOp::Div => "/",
            };
            return Err(format!(
                "cannot compute {} {sym} {}",
                a.describe(),
                b.describe()
            ));
        }
    };
    Ok(r)
}

fn num_op(op: ArithOp, x: f64, y: f64) -> Result<f64, String> {
    Ok(match op {
        ArithOp::Add => x + y,
        ArithOp::Sub => x - y,
        ArithOp::Mul => x * y,
        ArithOp::Div => {
            if y == 0.0 {
                return Err("division by zero".into());
            }
            x / y
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimensions_follow_the_arithmetic() {
        let gib = Value::Quantity(1073741824.0, Dimension::Bytes);
        assert_eq!(
            arith(ArithOp::Mul, &Value::Number(2.0), &gib).unwrap(),
            Value::Quantity(2147483648.0, Dimension::Bytes)
        );
        assert_eq!(arith(ArithOp::Div, &gib, &gib).unwrap(), Value::Number(1.0));
        let sec = Value::Quantity(1.0, Dimension::Time);
        assert!(arith(ArithOp::Add, &gib, &sec).is_err());
        assert!(arith(ArithOp::Add, &gib, &Value::Number(1.0)).is_err());
        assert!(arith(ArithOp::Div, &Value::Number(1.0), &Value::Number(0.0)).is_err());
    }
}
