//! Install-time validation of a compiled module: which ABI version it implements, its imports,
//! exports and declared shape (ABI v2), and its memory against the grant. No guest code runs.
//!
//! A module is ABI v2 if it imports from `adisk_v2`, carries an `adisk_v2` custom section or
//! exports `adisk_next_input` / `adisk_input_ended`; otherwise it is ABI v1 (and is checked
//! exactly as before v2 existed).
use crate::abi::{self, Shape, v2};
use crate::error::{Result, WasmError};
use crate::limits::WasmLimits;
use wasmtime::{ExternType, Module, ValType};

/// What install-time validation found out about a module.
#[derive(Clone, Debug)]
pub struct ModuleFacts {
    /// Declared maximum of the module's memory, bytes.
    pub memory_max_bytes: u64,
    /// Time spent compiling.
    pub compile_ns: u64,
    /// ABI version, inputs and output ports.
    pub shape: Shape,
}

/// The imports and exports of one ABI version.
struct Rules {
    version: u32,
    module: &'static str,
    imports: &'static [(&'static str, &'static str, usize)],
    exports: &'static [(&'static str, &'static str)],
}

const V1: Rules = Rules {
    version: 1,
    module: abi::IMPORT_MODULE,
    imports: &abi::ALLOWED_IMPORTS,
    exports: &abi::REQUIRED_EXPORTS,
};
const V2: Rules = Rules {
    version: 2,
    module: v2::IMPORT_MODULE,
    imports: &v2::ALLOWED_IMPORTS,
    exports: &v2::REQUIRED_EXPORTS,
};

/// Validates `module` (compiled from the binary `wasm`) for a disklet installed with
/// `scratch_kib` of scratch.
///
/// # Errors
/// [`WasmError::ForbiddenImport`], [`WasmError::Abi`], [`WasmError::Memory`],
/// [`WasmError::Malformed`] (a damaged custom section).
pub fn validate(
    module: &Module,
    wasm: &[u8],
    limits: &WasmLimits,
    scratch_kib: u64,
    compile_ns: u64,
) -> Result<ModuleFacts> {
    let section = custom_section(wasm, v2::SHAPE_SECTION).map_err(WasmError::Malformed)?;
    let rules = if is_v2(module, section.is_some())? {
        &V2
    } else {
        &V1
    };
    check_imports(module, rules)?;
    check_exports(module, rules)?;
    let shape = match (rules.version, section) {
        (1, _) => Shape::V1,
        (_, Some(text)) => abi::parse_shape(text).map_err(|why| {
            WasmError::Abi(format!("custom section `{}`: {why}", v2::SHAPE_SECTION))
        })?,
        (_, None) => {
            return Err(WasmError::Abi(format!(
                "an ABI v2 module declares its shape in a custom section `{}` holding `inputs=N outputs=K` (C SDK: ADISK_SHAPE(N, K))",
                v2::SHAPE_SECTION
            )));
        }
    };
    let memory_max_bytes = check_memory(module, limits, scratch_kib, shape.inputs)?;
    Ok(ModuleFacts {
        memory_max_bytes,
        compile_ns,
        shape,
    })
}

fn is_v2(module: &Module, has_shape: bool) -> Result<bool> {
    let imports_from = |m: &str| module.imports().any(|i| i.module() == m);
    let v2_exports = ["adisk_next_input", "adisk_input_ended"]
        .iter()
        .any(|e| module.get_export(e).is_some());
    let v2 = has_shape || v2_exports || imports_from(v2::IMPORT_MODULE);
    if v2 && imports_from(abi::IMPORT_MODULE) {
        return Err(WasmError::Abi(format!(
            "the module mixes ABI versions: it imports from `{}` but is an ABI v2 module",
            abi::IMPORT_MODULE
        )));
    }
    Ok(v2)
}

fn valtypes(types: impl Iterator<Item = ValType>) -> String {
    types.map(|t| t.to_string()).collect::<Vec<_>>().join(" ")
}

fn check_imports(module: &Module, rules: &Rules) -> Result<()> {
    for import in module.imports() {
        let allowed = rules
            .imports
            .iter()
            .find(|(name, ..)| *name == import.name());
        let (Some((name, params, results)), true) = (allowed, import.module() == rules.module)
        else {
            return Err(WasmError::ForbiddenImport {
                module: import.module().to_string(),
                name: import.name().to_string(),
                allowed: rules.module,
            });
        };
        let ExternType::Func(f) = import.ty() else {
            return Err(WasmError::Abi(format!(
                "import `{}::{name}` must be a function",
                rules.module
            )));
        };
        if valtypes(f.params()) != *params
            || f.results().len() != *results
            || f.results().any(|t| !matches!(t, ValType::I32))
        {
            return Err(WasmError::Abi(format!(
                "import `{name}` must have parameters ({params}) and {results} i32 result(s)"
            )));
        }
    }
    Ok(())
}

fn check_exports(module: &Module, rules: &Rules) -> Result<()> {
    for (name, params) in rules.exports {
        let Some(ExternType::Func(f)) = module.get_export(name) else {
            return Err(WasmError::Abi(format!(
                "required export `{name}` (ABI v{}) is missing or not a function",
                rules.version
            )));
        };
        if valtypes(f.params()) != *params
            || f.results().len() != 1
            || f.results().any(|t| !matches!(t, ValType::I32))
        {
            return Err(WasmError::Abi(format!(
                "export `{name}` must take ({params}) and return one i32"
            )));
        }
    }
    Ok(())
}

/// The declared memory maximum, checked against the grant (scratch + one input area per input).
fn check_memory(
    module: &Module,
    limits: &WasmLimits,
    scratch_kib: u64,
    inputs: u32,
) -> Result<u64> {
    let grant_bytes = limits.grant_bytes_for(scratch_kib, inputs);
    let Some(ExternType::Memory(memory)) = module.get_export("memory") else {
        return Err(WasmError::Abi(
            "the module must export its memory as `memory`".into(),
        ));
    };
    if memory.is_shared() || memory.is_64() {
        return Err(WasmError::Memory(
            "shared and 64-bit memories are not allowed".into(),
        ));
    }
    let Some(max_pages) = memory.maximum() else {
        return Err(WasmError::Memory(format!(
            "the memory declares no maximum; declare one within the grant of {grant_bytes} bytes (clang: -Wl,--max-memory=N)"
        )));
    };
    let memory_max_bytes = max_pages.saturating_mul(memory.page_size());
    if memory_max_bytes > grant_bytes {
        let areas = if inputs == 1 {
            "input area".to_string()
        } else {
            format!("{inputs} input areas")
        };
        return Err(WasmError::Memory(format!(
            "the memory declares a maximum of {memory_max_bytes} bytes, more than the grant of {grant_bytes} bytes (scratch + {areas})"
        )));
    }
    Ok(memory_max_bytes)
}

/// Reads an unsigned LEB128 u32 at the start of `bytes`: (value, bytes used).
fn leb_u32(bytes: &[u8]) -> Result<(u32, usize), String> {
    let mut value = 0u64;
    for (i, b) in bytes.iter().take(5).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return u32::try_from(value)
                .map(|v| (v, i + 1))
                .map_err(|_| "LEB128 value out of range".to_string());
        }
    }
    Err("truncated LEB128 value".into())
}

/// The payload of the custom section `name` of a binary module, if it has one.
///
/// # Errors
/// A section running past the end, or two sections of that name.
pub fn custom_section<'a>(wasm: &'a [u8], name: &str) -> Result<Option<&'a [u8]>, String> {
    let mut at = 8; // magic and version
    let mut found = None;
    while at < wasm.len() {
        let (size, used) = leb_u32(&wasm[at + 1..])?;
        let start = at + 1 + used;
        let end = start
            .checked_add(size as usize)
            .filter(|e| *e <= wasm.len())
            .ok_or("a section runs past the end of the module")?;
        if wasm[at] == 0 {
            let (len, used) = leb_u32(&wasm[start..end])?;
            let payload = (start + used)
                .checked_add(len as usize)
                .filter(|p| *p <= end)
                .ok_or("a custom section's name runs past the section")?;
            if &wasm[start + used..payload] == name.as_bytes()
                && found.replace(&wasm[payload..end]).is_some()
            {
                return Err(format!("the module has two `{name}` custom sections"));
            }
        }
        at = end;
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_custom_sections() {
        let wasm = wat::parse_str(
            r#"(module (@custom "other" "x") (@custom "adisk_v2" "inputs=2 outputs=3") (func))"#,
        )
        .unwrap();
        assert_eq!(
            custom_section(&wasm, "adisk_v2").unwrap(),
            Some(&b"inputs=2 outputs=3"[..])
        );
        assert_eq!(custom_section(&wasm, "none").unwrap(), None);
        let twice = wat::parse_str(r#"(module (@custom "adisk_v2" "a") (@custom "adisk_v2" "b"))"#)
            .unwrap();
        assert!(
            custom_section(&twice, "adisk_v2")
                .unwrap_err()
                .contains("two")
        );
        assert!(
            custom_section(&wasm[..wasm.len() - 1], "adisk_v2").is_err(),
            "a truncated module"
        );
    }
}
