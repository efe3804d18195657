//! What the proxy forwards. The provider acts on a request with the real key and its
//! own network, so anything that makes it reach out (MCP servers, its own web, code and
//! file tools, containers, files or images by URL or id, stored responses) would carry
//! sandbox data past the sandbox and cost fees no budget counts. Each API gets an
//! allowlist of the fields, tools and content a client-side agent needs; everything else
//! is refused, naming the field, before anything is sent.

use serde_json::{Map, Value};

use super::api::Api;

/// Why a request was refused, for the provider-shaped 400.
pub(super) type Refusal = String;

const MESSAGES: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "metadata",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
    "context_management",
];

// `n` and `store` are allowed only at their defaults (below): more choices cost more than
// the reserved output, and stored completions outlive the run at the provider.
const CHAT: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "n",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "seed",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "reasoning_effort",
    "verbosity",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "store",
];

const RESPONSES: &[&str] = &[
    "model",
    "input",
    "instructions",
    "max_output_tokens",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_tool_calls",
    "reasoning",
    "include",
    "store",
    "prompt_cache_key",
    "client_metadata",
    "metadata",
    "temperature",
    "top_p",
    "top_logprobs",
    "text",
    "truncation",
    "user",
    "safety_identifier",
];

/// Extra output the Responses API may return; the others (`web_search_call.*`,
/// `file_search_call.results`, image URLs…) belong to provider-side tools.
const RESPONSES_INCLUDE: &[&str] = &[
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
];

/// Refuses `request` unless everything in it is allowed on `api`.
pub(super) fn check(api: Api, request: &Map<String, Value>) -> Result<(), Refusal> {
    match api {
        // Counting takes a message request as it would be sent; the provider ignores or
        // refuses what does not count, and nothing in the list reaches further.
        Api::Messages | Api::CountTokens => anthropic(request, MESSAGES),
        Api::ChatCompletions => chat(request),
        Api::Responses => responses(request),
    }
}

fn refused(path: &str, why: &str) -> Refusal {
    format!("Cannot forward the request: `{path}` {why}; remove it")
}

fn not_passed(path: &str) -> Refusal {
    refused(
        path,
        "is not a field the model proxy passes on (it forwards only what an agent that runs its tools itself needs)",
    )
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn object<'a>(path: &str, value: &'a Value) -> Result<&'a Map<String, Value>, Refusal> {
    value
        .as_object()
        .ok_or_else(|| refused(path, "must be a JSON object"))
}

fn array<'a>(path: &str, value: &'a Value) -> Result<&'a [Value], Refusal> {
    value
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| refused(path, "must be a JSON array"))
}

fn only(path: &str, object: &Map<String, Value>, allowed: &[&str]) -> Result<(), Refusal> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(not_passed(&join(path, key))),
        None => Ok(()),
    }
}

fn kind<'a>(path: &str, object: &'a Map<String, Value>) -> Result<&'a str, Refusal> {
    object
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| refused(&join(path, "type"), "is missing"))
}

/// Each element of the array at `key`, if there is one, with its path.
fn each<'a>(
    path: &str,
    object: &'a Map<String, Value>,
    key: &str,
    mut f: impl FnMut(&str, &'a Value) -> Result<(), Refusal>,
) -> Result<(), Refusal> {
    let Some(value) = object.get(key) else {
        return Ok(());
    };
    let path = join(path, key);
    for (i, item) in array(&path, value)?.iter().enumerate() {
        f(&format!("{path}[{i}]"), item)?;
    }
    Ok(())
}

fn provider_tool(path: &str, kind: &str, expected: &str) -> Refusal {
    format!(
        "Cannot forward the request: `{path}` is a `{kind}` tool, which the provider runs itself \
         with its own network; the model proxy forwards only tools the executor runs ({expected}); remove it"
    )
}

fn block_type(path: &str, kind: &str) -> Refusal {
    refused(
        &join(path, "type"),
        &format!("is `{kind}`, content the model proxy does not pass on"),
    )
}

/// Images and documents travel as data only: by URL or file id the provider fetches them.
fn data_only(path: &str, value: &Value, prefix: &str) -> Result<(), Refusal> {
    match value.as_str() {
        Some(url) if url.starts_with(prefix) => Ok(()),
        _ => Err(refused(
            path,
            &format!(
                "is not inline data (`{prefix}…`); the model proxy forwards images only as data, never by URL or file id"
            ),
        )),
    }
}

// Anthropic

fn anthropic(request: &Map<String, Value>, allowed: &[&str]) -> Result<(), Refusal> {
    only("", request, allowed)?;
    if let Some(metadata) = request.get("metadata") {
        only("metadata", object("metadata", metadata)?, &["user_id"])?;
    }
    if let Some(system) = request.get("system")
        && !system.is_string()
    {
        for (i, block) in array("system", system)?.iter().enumerate() {
            let path = format!("system[{i}]");
            let block = object(&path, block)?;
            match kind(&path, block)? {
                "text" => only(&path, block, &["type", "text", "cache_control"])?,
                other => return Err(block_type(&path, other)),
            }
        }
    }
    each("", request, "messages", |path, message| {
        let message = object(path, message)?;
        only(path, message, &["role", "content"])?;
        match message.get("content") {
            Some(Value::String(_)) | None => Ok(()),
            Some(content) => {
                let path = join(path, "content");
                for (i, block) in array(&path, content)?.iter().enumerate() {
                    anthropic_block(&format!("{path}[{i}]"), block, false)?;
                }
                Ok(())
            }
        }
    })?;
    each("", request, "tools", |path, tool| {
        let tool = object(path, tool)?;
        if let Some(kind) = tool.get("type").and_then(Value::as_str)
            && kind != "custom"
        {
            return Err(provider_tool(
                path,
                kind,
                "custom tools with an `input_schema`",
            ));
        }
        only(
            path,
            tool,
            &[
                "type",
                "name",
                "description",
                "input_schema",
                "cache_control",
                "strict",
            ],
        )?;
        if !tool.get("input_schema").is_some_and(Value::is_object) {
            return Err(provider_tool(
                path,
                "schema-less",
                "custom tools with an `input_schema`",
            ));
        }
        Ok(())
    })?;
    if let Some(choice) = request.get("tool_choice") {
        let choice = object("tool_choice", choice)?;
        only(
            "tool_choice",
            choice,
            &["type", "name", "disable_parallel_tool_use"],
        )?;
        let kind = kind("tool_choice", choice)?;
        if !matches!(kind, "auto" | "any" | "tool" | "none") {
            return Err(block_type("tool_choice", kind));
        }
    }
    if let Some(thinking) = request.get("thinking") {
        only(
            "thinking",
            object("thinking", thinking)?,
            &["type", "budget_tokens", "display"],
        )?;
    }
    if let Some(context) = request.get("context_management") {
        let context = object("context_management", context)?;
        only("context_management", context, &["edits"])?;
        // Edits only drop earlier thinking or tool results from what the model sees.
        each("context_management", context, "edits", |path, edit| {
            let edit = object(path, edit)?;
            let kind = kind(path, edit)?;
            if kind.starts_with("clear_thinking_") || kind.starts_with("clear_tool_uses_") {
                Ok(())
            } else {
                Err(block_type(path, kind))
            }
        })?;
    }
    Ok(())
}

/// One content block; `nested` is inside a tool result, which holds content only.
fn anthropic_block(path: &str, block: &Value, nested: bool) -> Result<(), Refusal> {
    let block = object(path, block)?;
    let kind = kind(path, block)?;
    match (kind, nested) {
        ("text", _) => only(path, block, &["type", "text", "cache_control", "citations"]),
        ("image", _) => {
            only(path, block, &["type", "source", "cache_control"])?;
            anthropic_source(path, block, &["base64"])
        }
        ("document", _) => {
            only(
                path,
                block,
                &[
                    "type",
                    "source",
                    "title",
                    "context",
                    "citations",
                    "cache_control",
                ],
            )?;
            anthropic_source(path, block, &["base64", "text"])
        }
        ("tool_use", false) => only(
            path,
            block,
            &["type", "id", "name", "input", "cache_control"],
        ),
        ("tool_result", false) => {
            only(
                path,
                block,
                &[
                    "type",
                    "tool_use_id",
                    "content",
                    "is_error",
                    "cache_control",
                ],
            )?;
            match block.get("content") {
                Some(Value::String(_)) | None => Ok(()),
                Some(content) => {
                    let path = join(path, "content");
                    for (i, inner) in array(&path, content)?.iter().enumerate() {
                        anthropic_block(&format!("{path}[{i}]"), inner, true)?;
                    }
                    Ok(())
                }
            }
        }
        ("thinking", false) => only(
            path,
            block,
            &["type", "thinking", "signature", "cache_control"],
        ),
        ("redacted_thinking", false) => only(path, block, &["type", "data"]),
        (other, _) => Err(block_type(path, other)),
    }
}

fn anthropic_source(path: &str, block: &Map<String, Value>, kinds: &[&str]) -> Result<(), Refusal> {
    let path = join(path, "source");
    let source = object(&path, block.get("source").unwrap_or(&Value::Null))?;
    let kind = kind(&path, source)?;
    if !kinds.contains(&kind) {
        return Err(refused(
            &join(&path, "type"),
            &format!(
                "is `{kind}`; the model proxy forwards images and documents only as inline data (`base64`), never by URL or file id"
            ),
        ));
    }
    only(&path, source, &["type", "media_type", "data"])
}

// OpenAI Chat Completions

fn chat(request: &Map<String, Value>) -> Result<(), Refusal> {
    only("", request, CHAT)?;
    if request.get("n").is_some_and(|n| n.as_u64() != Some(1)) {
        return Err(refused(
            "n",
            "asks for more than one choice, whose output the budget does not cover",
        ));
    }
    if request.get("store").is_some_and(|s| s != false) {
        return Err(refused(
            "store",
            "asks the provider to keep the conversation past the run",
        ));
    }
    if let Some(options) = request.get("stream_options") {
        only(
            "stream_options",
            object("stream_options", options)?,
            &["include_usage", "include_obfuscation"],
        )?;
    }
    each("", request, "messages", |path, message| {
        let message = object(path, message)?;
        only(
            path,
            message,
            &[
                "role",
                "content",
                "name",
                "tool_calls",
                "tool_call_id",
                "refusal",
                "reasoning_content",
            ],
        )?;
        match message.get("content") {
            Some(Value::String(_) | Value::Null) | None => {}
            Some(content) => {
                let path = join(path, "content");
                for (i, part) in array(&path, content)?.iter().enumerate() {
                    let path = format!("{path}[{i}]");
                    let part = object(&path, part)?;
                    match kind(&path, part)? {
                        "text" => only(&path, part, &["type", "text"])?,
                        "refusal" => only(&path, part, &["type", "refusal"])?,
                        "image_url" => {
                            only(&path, part, &["type", "image_url"])?;
                            let image_path = join(&path, "image_url");
                            let image =
                                object(&image_path, part.get("image_url").unwrap_or(&Value::Null))?;
                            only(&image_path, image, &["url", "detail"])?;
                            data_only(
                                &join(&image_path, "url"),
                                image.get("url").unwrap_or(&Value::Null),
                                "data:",
                            )?;
                        }
                        other => return Err(block_type(&path, other)),
                    }
                }
            }
        }
        each(path, message, "tool_calls", |path, call| {
            let call = object(path, call)?;
            only(path, call, &["id", "type", "function"])?;
            match kind(path, call)? {
                "function" => Ok(()),
                other => Err(block_type(path, other)),
            }
        })
    })?;
    each("", request, "tools", |path, tool| {
        let tool = object(path, tool)?;
        let kind = kind(path, tool)?;
        if kind != "function" {
            return Err(provider_tool(path, kind, "`function` tools"));
        }
        only(path, tool, &["type", "function"])?;
        let function_path = join(path, "function");
        let function = object(&function_path, tool.get("function").unwrap_or(&Value::Null))?;
        only(
            &function_path,
            function,
            &["name", "description", "parameters", "strict"],
        )
    })?;
    match request.get("tool_choice") {
        None | Some(Value::String(_)) => Ok(()),
        Some(choice) => {
            let choice = object("tool_choice", choice)?;
            only("tool_choice", choice, &["type", "function"])?;
            match kind("tool_choice", choice)? {
                "function" => Ok(()),
                other => Err(block_type("tool_choice", other)),
            }
        }
    }
}

// OpenAI Responses

fn responses(request: &Map<String, Value>) -> Result<(), Refusal> {
    only("", request, RESPONSES)?;
    if request.get("store").is_some_and(|s| s != false) {
        return Err(refused(
            "store",
            "asks the provider to keep the response past the run (send `\"store\": false`)",
        ));
    }
    if let Some(reasoning) = request.get("reasoning") {
        only(
            "reasoning",
            object("reasoning", reasoning)?,
            &["effort", "summary", "generate_summary"],
        )?;
    }
    if let Some(text) = request.get("text") {
        only("text", object("text", text)?, &["format", "verbosity"])?;
    }
    if let Some(options) = request.get("stream_options") {
        only(
            "stream_options",
            object("stream_options", options)?,
            &["include_obfuscation"],
        )?;
    }
    each("", request, "include", |path, include| {
        match include.as_str() {
            Some(name) if RESPONSES_INCLUDE.contains(&name) => Ok(()),
            _ => Err(refused(
                path,
                &format!("asks for {include}, output of a tool the provider runs itself"),
            )),
        }
    })?;
    if let Some(input) = request.get("input")
        && !input.is_string()
    {
        for (i, item) in array("input", input)?.iter().enumerate() {
            responses_item(&format!("input[{i}]"), item)?;
        }
    }
    each("", request, "tools", |path, tool| {
        responses_tool(path, tool, true)
    })?;
    match request.get("tool_choice") {
        None | Some(Value::String(_)) => Ok(()),
        Some(choice) => {
            let choice = object("tool_choice", choice)?;
            match kind("tool_choice", choice)? {
                "function" | "custom" => only("tool_choice", choice, &["type", "name"]),
                "allowed_tools" => {
                    only("tool_choice", choice, &["type", "mode", "tools"])?;
                    each("tool_choice", choice, "tools", |path, tool| {
                        let tool = object(path, tool)?;
                        match kind(path, tool)? {
                            "function" | "custom" => only(path, tool, &["type", "name"]),
                            other => Err(provider_tool(path, other, "`function` tools")),
                        }
                    })
                }
                other => Err(provider_tool("tool_choice", other, "`function` tools")),
            }
        }
    }
}

/// Function and custom (free-form) tools are called by the model and run by the client;
/// a namespace groups such tools.
fn responses_tool(path: &str, tool: &Value, top: bool) -> Result<(), Refusal> {
    let tool = object(path, tool)?;
    match kind(path, tool)? {
        "function" => only(
            path,
            tool,
            &["type", "name", "description", "parameters", "strict"],
        ),
        "custom" => only(path, tool, &["type", "name", "description", "format"]),
        "namespace" if top => {
            only(path, tool, &["type", "name", "description", "tools"])?;
            each(path, tool, "tools", |path, inner| {
                responses_tool(path, inner, false)
            })
        }
        other => Err(provider_tool(path, other, "`function` tools")),
    }
}

fn responses_item(path: &str, item: &Value) -> Result<(), Refusal> {
    let item = object(path, item)?;
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    match kind {
        "message" => {
            only(
                path,
                item,
                &["type", "id", "role", "content", "status", "phase"],
            )?;
            match item.get("content") {
                Some(Value::String(_)) | None => Ok(()),
                Some(content) => responses_parts(&join(path, "content"), content),
            }
        }
        "function_call" => only(
            path,
            item,
            &[
                "type",
                "id",
                "call_id",
                "name",
                "namespace",
                "arguments",
                "status",
            ],
        ),
        "custom_tool_call" => only(
            path,
            item,
            &["type", "id", "call_id", "name", "input", "status"],
        ),
        "function_call_output" | "custom_tool_call_output" => {
            only(path, item, &["type", "id", "call_id", "output", "status"])?;
            match item.get("output") {
                Some(Value::String(_)) | None => Ok(()),
                Some(output) => responses_parts(&join(path, "output"), output),
            }
        }
        "reasoning" => only(
            path,
            item,
            &[
                "type",
                "id",
                "summary",
                "content",
                "encrypted_content",
                "status",
            ],
        ),
        other => Err(block_type(path, other)),
    }
}

fn responses_parts(path: &str, parts: &Value) -> Result<(), Refusal> {
    for (i, part) in array(path, parts)?.iter().enumerate() {
        let path = format!("{path}[{i}]");
        let part = object(&path, part)?;
        match kind(&path, part)? {
            "input_text" => only(&path, part, &["type", "text"])?,
            "output_text" => only(&path, part, &["type", "text", "annotations", "logprobs"])?,
            "refusal" => only(&path, part, &["type", "refusal"])?,
            "input_image" => {
                only(&path, part, &["type", "image_url", "detail"])?;
                data_only(
                    &join(&path, "image_url"),
                    part.get("image_url").unwrap_or(&Value::Null),
                    "data:",
                )?;
            }
            other => return Err(block_type(&path, other)),
        }
    }
    Ok(())
}
