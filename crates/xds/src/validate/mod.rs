//! Envoy's own field rules, checked before a resource reaches Envoy.
//!
//! Envoy's protos carry protoc-gen-validate annotations, and Envoy checks
//! every update against them: one broken rule rejects the whole update
//! ("Proto constraint validation failed"). Over REST nobody upstream would
//! hear of it, so the gateway checks each resource when it arrives and NACKs
//! what Envoy would reject.
//!
//! [`Validator::validate`] walks a decoded message: every field's rules (see
//! [`rules`]), nested messages, list items, map values, and the payload of
//! `typed_config` `Any`s (and `typed_per_filter_config`,
//! `typed_extension_protocol_options`), which Envoy validates when it builds
//! the extension. Other `Any`s (metadata) are not looked into, as Envoy does
//! not either; nor is a `TypedStruct` payload. Each message type's plan is
//! read from the descriptor pool once. No I/O.

mod bounds;
mod broken;
mod check;
mod fields;
mod rules;
#[cfg(test)]
mod tests;
mod text;

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use prost_reflect::{
    DescriptorPool, DynamicMessage, ExtensionDescriptor, FieldDescriptor, MessageDescriptor,
    OneofDescriptor, ReflectMessage, Value,
};

use self::check::{check, holds_messages, show_key, violation};
use self::rules::{FieldRules, Rules};

/// Fields whose `Any` payload Envoy validates as an extension config (a
/// cluster's protocol options too, when it builds them).
const EXTENSION_FIELDS: &[&str] = &[
    "typed_config",
    "typed_per_filter_config",
    "typed_extension_protocol_options",
];

/// The first rule a resource breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message} [validate.rules.{rule}]")]
pub struct Violation {
    /// Where, from the resource down: `filter_chains[0].filters[0].typed_config(HttpConnectionManager).stat_prefix`.
    pub path: String,
    /// Which rule: `duration.gt`, `string.min_len`, `oneof.required`, ...
    pub rule: String,
    pub message: String,
}

/// One field of a message type and what to check on it.
#[derive(Debug)]
struct FieldPlan {
    field: FieldDescriptor,
    rules: Option<FieldRules>,
    /// Walk into it (a message, list of messages or map of messages).
    walk: bool,
}

/// What to check on one message type.
#[derive(Debug, Default)]
struct MessagePlan {
    fields: Vec<FieldPlan>,
    required_oneofs: Vec<OneofDescriptor>,
}

/// Checks messages of one descriptor pool against their annotations.
#[derive(Debug)]
pub struct Validator {
    pool: DescriptorPool,
    field_rules: Option<ExtensionDescriptor>,
    oneof_required: Option<ExtensionDescriptor>,
    message_disabled: Vec<ExtensionDescriptor>,
    plans: RwLock<HashMap<String, Arc<MessagePlan>>>,
}

impl Validator {
    /// A validator over `pool` (without `validate/validate.proto` in it,
    /// nothing is checked).
    pub fn new(pool: DescriptorPool) -> Validator {
        let ext = |name: &str| pool.get_extension_by_name(name);
        Validator {
            field_rules: ext("validate.rules"),
            oneof_required: ext("validate.required"),
            message_disabled: ["validate.disabled", "validate.ignored"]
                .into_iter()
                .filter_map(ext)
                .collect(),
            plans: RwLock::default(),
            pool,
        }
    }

    /// The first rule `message` (or anything in it) breaks, if any.
    pub fn validate(&self, message: &DynamicMessage) -> Result<(), Violation> {
        let mut path = Vec::new();
        self.walk(message, &mut path)
    }

    fn plan(&self, desc: &MessageDescriptor) -> Arc<MessagePlan> {
        // Plans are inserted whole: a poisoned lock holds nothing half-made.
        let plans = self.plans.read();
        if let Some(plan) = plans
            .unwrap_or_else(PoisonError::into_inner)
            .get(desc.full_name())
        {
            return plan.clone();
        }
        let plan = Arc::new(self.make_plan(desc));
        self.plans
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(desc.full_name().to_owned(), plan.clone());
        plan
    }

    fn make_plan(&self, desc: &MessageDescriptor) -> MessagePlan {
        let options = desc.options();
        if self
            .message_disabled
            .iter()
            .any(|ext| options.get_extension(ext).as_bool() == Some(true))
        {
            return MessagePlan::default();
        }
        let fields = desc
            .fields()
            .filter_map(|field| {
                let options = field.options();
                let rules = (self.field_rules.as_ref())
                    .filter(|ext| options.has_extension(ext))
                    .and_then(|ext| {
                        options
                            .get_extension(ext)
                            .as_message()
                            .map(FieldRules::read)
                    });
                let skip = rules.as_ref().is_some_and(|r| r.skip);
                let walk = !skip && holds_messages(&field);
                (rules.is_some() || walk).then_some(FieldPlan { field, rules, walk })
            })
            .collect();
        let required_oneofs = desc
            .oneofs()
            .filter(|o| {
                let ext = self.oneof_required.as_ref().filter(|_| !o.is_synthetic());
                ext.is_some_and(|ext| o.options().get_extension(ext).as_bool() == Some(true))
            })
            .collect();
        MessagePlan {
            fields,
            required_oneofs,
        }
    }

    fn walk(&self, message: &DynamicMessage, path: &mut Vec<String>) -> Result<(), Violation> {
        let plan = self.plan(&message.descriptor());
        for oneof in &plan.required_oneofs {
            if !oneof.fields().any(|f| message.has_field(&f)) {
                path.push(oneof.name().to_owned());
                return Err(violation(
                    path,
                    "oneof.required",
                    "exactly one field is required in this oneof",
                ));
            }
        }
        for plan in &plan.fields {
            let field = &plan.field;
            let present = message.has_field(field);
            // Members of a oneof (real or `optional`) are checked only when set.
            if !present && field.containing_oneof().is_some() {
                continue;
            }
            path.push(field.name().to_owned());
            self.check_field(message, plan, present, path)?;
            path.pop();
        }
        Ok(())
    }

    fn check_field(
        &self,
        message: &DynamicMessage,
        plan: &FieldPlan,
        present: bool,
        path: &mut Vec<String>,
    ) -> Result<(), Violation> {
        let field = &plan.field;
        let value = message.get_field(field);
        if let Some(rules) = &plan.rules {
            if rules.required && !present {
                return Err(violation(path, "message.required", "value is required"));
            }
            if field.is_list() || field.is_map() || field.kind().as_message().is_some() {
                if present || field.is_list() || field.is_map() {
                    self.check_container(field, &value, rules, path)?;
                }
            } else {
                check(&rules.rules, &value, field, path)?;
            }
        }
        if plan.walk && (present || field.is_list() || field.is_map()) {
            self.walk_into(field, &value, plan.rules.as_ref(), path)?;
        }
        Ok(())
    }
    /// Walks into the messages a field holds.
    fn walk_into(
        &self,
        field: &FieldDescriptor,
        value: &Value,
        rules: Option<&FieldRules>,
        path: &mut Vec<String>,
    ) -> Result<(), Violation> {
        let items_skip = |r: Option<&FieldRules>| match r.map(|r| &r.rules) {
            Some(Rules::Repeated {
                items: Some(items), ..
            }) => items.skip,
            Some(Rules::Map {
                values: Some(values),
                ..
            }) => values.skip,
            _ => false,
        };
        if items_skip(rules) {
            return Ok(());
        }
        let extension = EXTENSION_FIELDS.contains(&field.name());
        match value {
            Value::Message(inner) => self.walk_message(inner, extension, path),
            Value::List(items) => {
                for (i, item) in items.iter().enumerate() {
                    if let Value::Message(inner) = item {
                        path.push(format!("[{i}]"));
                        self.walk_message(inner, extension, path)?;
                        path.pop();
                    }
                }
                Ok(())
            }
            Value::Map(map) => {
                for (key, item) in map {
                    if let Value::Message(inner) = item {
                        path.push(format!("[{}]", show_key(key)));
                        self.walk_message(inner, extension, path)?;
                        path.pop();
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A nested message: an `Any` in an extension field is unpacked (when
    /// its type is known) and walked; other `Any`s are left alone.
    fn walk_message(
        &self,
        message: &DynamicMessage,
        extension: bool,
        path: &mut Vec<String>,
    ) -> Result<(), Violation> {
        let Some((type_url, payload)) = crate::opaque::any_parts(message) else {
            return self.walk(message, path);
        };
        let name = type_url.rsplit('/').next().unwrap_or_default();
        let desc = self.pool.get_message_by_name(name).filter(|_| extension);
        let Some(Ok(inner)) = desc.map(|desc| DynamicMessage::decode(desc, payload)) else {
            return Ok(());
        };
        let short = name.rsplit('.').next().unwrap_or(name);
        if let Some(last) = path.last_mut() {
            last.push_str(&format!("({short})"));
        }
        self.walk(&inner, path)
    }
}
