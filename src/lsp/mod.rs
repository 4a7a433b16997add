//! `planc lsp`: a language server over standard input and output.
//!
//! Every change to an open document re-runs the same check as `planc check` (open documents
//! take the place of their files, so an edited import counts before it is saved) and
//! publishes its diagnostics; hover explains diagnostic codes, shows the plan's prediction
//! on a block header and what `auto` became; completion offers the attributes a block
//! accepts, built-in GPUs and model presets; go to definition follows imports and
//! references (`model.hidden`); a diagnostic that knows its fix (a misspelt name) offers it
//! as a quick fix; the outline lists the blocks and their attributes; inlay hints show what
//! `auto` became beside it, and a code action writes it in; formatting is `planc fmt`. Synchronous on
//! purpose: a check takes milliseconds, so there is nothing to cancel.
//!
//! Whatever a document holds, the server stays up: the parser bounds how deep every
//! feature recurses (P0008), and a panic in one request (a bug) becomes an error response
//! for that request instead of ending the editor's session.

mod features;
mod position;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::process::ExitCode;

use lsp_server::{Connection, Message, Notification, Request, Response};
use lsp_types::notification::{
    DidChangeTextDocument, DidCloseTextDocument, DidOpenTextDocument, DidSaveTextDocument,
    Notification as _, PublishDiagnostics,
};
use lsp_types::request::{
    CodeActionRequest, Completion, DocumentSymbolRequest, Formatting, GotoDefinition, HoverRequest,
    InlayHintRequest, Request as _,
};
use lsp_types::{
    CompletionOptions, CompletionParams, CompletionResponse, DocumentFormattingParams, HoverParams,
    HoverProviderCapability, InitializeParams, OneOf, PublishDiagnosticsParams, ServerCapabilities,
    ServerInfo, TextDocumentSyncCapability, TextDocumentSyncKind, Url,
};

pub fn run() -> ExitCode {
    let (connection, threads) = Connection::stdio();
    let capabilities = ServerCapabilities {
        text_document_sync: Some(TextDocumentSyncCapability::Kind(TextDocumentSyncKind::FULL)),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(vec!["=".into(), " ".into()]),
            ..Default::default()
        }),
        document_formatting_provider: Some(OneOf::Left(true)),
        definition_provider: Some(OneOf::Left(true)),
        code_action_provider: Some(lsp_types::CodeActionProviderCapability::Simple(true)),
        document_symbol_provider: Some(OneOf::Left(true)),
        inlay_hint_provider: Some(OneOf::Left(true)),
        ..Default::default()
    };
    let init = serde_json::json!({
        "capabilities": capabilities,
        "serverInfo": ServerInfo { name: "planc".into(), version: Some(env!("CARGO_PKG_VERSION").into()) },
    });
    let result = connection
        .initialize_start()
        .map_err(|e| e.to_string())
        .and_then(|(id, params)| {
            let _: InitializeParams = serde_json::from_value(params).map_err(|e| e.to_string())?;
            connection
                .initialize_finish(id, init)
                .map_err(|e| e.to_string())?;
            Server::default().serve(&connection)
        });
    drop(connection);
    let _ = threads.join();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("planc lsp: {e}");
            ExitCode::from(1)
        }
    }
}

#[derive(Default)]
struct Server {
    /// Open documents by the path they stand for.
    open: HashMap<PathBuf, String>,
    /// Files we published diagnostics for, by the document that caused them, so that
    /// fixed problems disappear from files the document no longer imports.
    published: HashMap<PathBuf, Vec<PathBuf>>,
    /// The last check of each plan published, so that hover and definition answer from it
    /// instead of checking (and perhaps solving) the plan again on every request.
    checked: HashMap<PathBuf, planc_compiler::check::Checked>,
}

/// The path a document stands for; an unsaved buffer gets one of its own.
fn path_of(uri: &Url) -> PathBuf {
    uri.to_file_path()
        .unwrap_or_else(|_| PathBuf::from(format!("/planc-untitled/{}", uri.path())))
}

fn uri_of(path: &std::path::Path) -> Option<Url> {
    if path.starts_with("/planc-untitled") {
        return Some(untitled(path));
    }
    Url::from_file_path(path).ok()
}

impl Server {
    fn serve(&mut self, connection: &Connection) -> Result<(), String> {
        // Shutdown is handled here rather than by lsp-server's helper, which fails on a
        // second `shutdown` (Neovim sends one per `stop_client` and one on quit).
        let mut shut_down = false;
        for message in &connection.receiver {
            match message {
                Message::Request(req) if req.method == "shutdown" => {
                    shut_down = true;
                    send(connection, Message::Response(Response::new_ok(req.id, ())))?;
                }
                Message::Request(req) if shut_down => {
                    let refused = Response::new_err(
                        req.id,
                        lsp_server::ErrorCode::InvalidRequest as i32,
                        "the server is shutting down".into(),
                    );
                    send(connection, Message::Response(refused))?;
                }
                Message::Request(req) => {
                    let id = req.id.clone();
                    let response = catch_unwind(AssertUnwindSafe(|| self.request(req)))
                        .unwrap_or_else(|_| {
                            Response::new_err(
                                id,
                                lsp_server::ErrorCode::InternalError as i32,
                                "planc lsp failed on this request (a bug in planc; please report it with the document)".into(),
                            )
                        });
                    send(connection, Message::Response(response))?;
                }
                Message::Notification(n) if n.method == "exit" => return Ok(()),
                Message::Notification(n) => {
                    let outs =
                        catch_unwind(AssertUnwindSafe(|| self.notification(n))).unwrap_or_default();
                    for out in outs {
                        send(connection, Message::Notification(out))?;
                    }
                }
                Message::Response(_) => {}
            }
        }
        Ok(())
    }

    /// The checked plan of an open document, its path and text, and the cursor's offset.
    /// The checked plan a document belongs to, its path and text, and the cursor's offset.
    fn at(
        &self,
        doc: &lsp_types::TextDocumentPositionParams,
    ) -> Option<(&planc_compiler::check::Checked, PathBuf, &str, usize)> {
        let path = path_of(&doc.text_document.uri);
        let text = self.open.get(&path)?;
        let at = features::at(text, doc.position);
        let root = self.importer_of(&path).unwrap_or_else(|| path.clone());
        let checked = self.checked.get(&root)?;
        Some((checked, path, text.as_str(), at))
    }

    fn request(&mut self, req: Request) -> Response {
        let id = req.id.clone();
        let result = match req.method.as_str() {
            HoverRequest::METHOD => parse::<HoverParams>(req)
                .map(|p| {
                    let (checked, path, text, at) = self.at(&p.text_document_position_params)?;
                    features::hover(checked, &path, text, at)
                })
                .map(json),
            Completion::METHOD => parse::<CompletionParams>(req)
                .map(|p| {
                    let doc = p.text_document_position;
                    let text = self.open.get(&path_of(&doc.text_document.uri))?;
                    let items = features::completion(text, features::at(text, doc.position));
                    Some(CompletionResponse::Array(items))
                })
                .map(json),
            GotoDefinition::METHOD => parse::<lsp_types::GotoDefinitionParams>(req)
                .map(|p| {
                    let (checked, path, _, at) = self.at(&p.text_document_position_params)?;
                    features::definition(checked, &path, at)
                        .map(lsp_types::GotoDefinitionResponse::Scalar)
                })
                .map(json),
            CodeActionRequest::METHOD => parse::<lsp_types::CodeActionParams>(req)
                .map(|p| {
                    let uri = &p.text_document.uri;
                    let mut actions = features::code_actions(uri, &p.context.diagnostics);
                    let path = path_of(uri);
                    let root = self.importer_of(&path).unwrap_or_else(|| path.clone());
                    if let (Some(text), Some(checked)) =
                        (self.open.get(&path), self.checked.get(&root))
                    {
                        actions.extend(features::pin_actions(checked, &path, text, uri, p.range));
                    }
                    actions
                })
                .map(json),
            DocumentSymbolRequest::METHOD => parse::<lsp_types::DocumentSymbolParams>(req)
                .map(|p| {
                    let text = self.open.get(&path_of(&p.text_document.uri))?;
                    Some(lsp_types::DocumentSymbolResponse::Nested(
                        features::symbols(text),
                    ))
                })
                .map(json),
            InlayHintRequest::METHOD => parse::<lsp_types::InlayHintParams>(req)
                .map(|p| {
                    let path = path_of(&p.text_document.uri);
                    let text = self.open.get(&path)?;
                    let root = self.importer_of(&path).unwrap_or_else(|| path.clone());
                    let checked = self.checked.get(&root)?;
                    Some(features::inlay_hints(checked, &path, text))
                })
                .map(json),
            Formatting::METHOD => parse::<DocumentFormattingParams>(req)
                .map(|p| {
                    let text = self.open.get(&path_of(&p.text_document.uri))?;
                    features::formatting(text)
                })
                .map(json),
            other => {
                return Response::new_err(
                    id,
                    lsp_server::ErrorCode::MethodNotFound as i32,
                    format!("planc lsp does not handle {other}"),
                )
            }
        };
        match result {
            Ok(value) => Response::new_ok(id, value),
            Err(e) => Response::new_err(id, lsp_server::ErrorCode::InvalidParams as i32, e),
        }
    }

    fn notification(&mut self, n: Notification) -> Vec<Notification> {
        let changed = match n.method.as_str() {
            DidOpenTextDocument::METHOD => {
                parse_n::<lsp_types::DidOpenTextDocumentParams>(n).map(|p| {
                    let path = path_of(&p.text_document.uri);
                    self.open.insert(path.clone(), p.text_document.text);
                    path
                })
            }
            DidChangeTextDocument::METHOD => {
                parse_n::<lsp_types::DidChangeTextDocumentParams>(n).and_then(|p| {
                    let path = path_of(&p.text_document.uri);
                    // Full sync: the last change is the whole text.
                    let text = p.content_changes.into_iter().last()?.text;
                    self.open.insert(path.clone(), text);
                    Some(path)
                })
            }
            DidSaveTextDocument::METHOD => parse_n::<lsp_types::DidSaveTextDocumentParams>(n)
                .map(|p| path_of(&p.text_document.uri)),
            DidCloseTextDocument::METHOD => {
                if let Some(p) = parse_n::<lsp_types::DidCloseTextDocumentParams>(n) {
                    let path = path_of(&p.text_document.uri);
                    self.open.remove(&path);
                    self.checked.remove(&path);
                    return self.clear(&path);
                }
                None
            }
            _ => None,
        };
        match changed {
            // An open file that another open plan imports is checked as part of that plan:
            // on its own it lacks the blocks the importer supplies.
            Some(path) => {
                let root = self.importer_of(&path).unwrap_or(path);
                self.publish(&root)
            }
            None => Vec::new(),
        }
    }

    fn publish(&mut self, path: &PathBuf) -> Vec<Notification> {
        let Some(checked) = features::analyze(path, &self.open) else {
            return Vec::new();
        };
        let mut out = self.clear(path);
        let mut files = Vec::new();
        for (file, diagnostics) in features::diagnostics(&checked) {
            if let Some(uri) = uri_of(&file) {
                out.retain(|n| n.params["uri"] != uri.as_str());
                out.push(diagnostics_notification(uri, diagnostics));
                files.push(file);
            }
        }
        self.published.insert(path.clone(), files);
        self.checked.insert(path.clone(), checked);
        out
    }

    fn importer_of(&self, path: &PathBuf) -> Option<PathBuf> {
        self.published
            .iter()
            .find(|(root, files)| {
                *root != path && self.open.contains_key(*root) && files.contains(path)
            })
            .map(|(root, _)| root.clone())
    }

    /// Empties the diagnostics this document put anywhere.
    fn clear(&mut self, path: &PathBuf) -> Vec<Notification> {
        self.published
            .remove(path)
            .unwrap_or_default()
            .iter()
            .filter_map(|f| uri_of(f))
            .map(|uri| diagnostics_notification(uri, Vec::new()))
            .collect()
    }
}

fn untitled(path: &std::path::Path) -> Url {
    Url::parse(&format!(
        "untitled:{}",
        path.strip_prefix("/planc-untitled/")
            .unwrap_or(path)
            .display()
    ))
    .expect("an untitled URI")
}

fn diagnostics_notification(uri: Url, diagnostics: Vec<lsp_types::Diagnostic>) -> Notification {
    Notification::new(
        PublishDiagnostics::METHOD.into(),
        PublishDiagnosticsParams::new(uri, diagnostics, None),
    )
}

fn json<T: serde::Serialize>(value: T) -> serde_json::Value {
    serde_json::to_value(value).expect("LSP types serialise")
}

fn parse<P: serde::de::DeserializeOwned>(req: Request) -> Result<P, String> {
    serde_json::from_value(req.params).map_err(|e| format!("bad {} params: {e}", req.method))
}

fn parse_n<P: serde::de::DeserializeOwned>(n: Notification) -> Option<P> {
    serde_json::from_value(n.params).ok()
}

fn send(connection: &Connection, message: Message) -> Result<(), String> {
    connection.sender.send(message).map_err(|e| e.to_string())
}
