//! The console's pages, rendered from the templates in `crates/server/templates/console/`. A
//! page is a frame: its script reads the operator API with the session's cookie and draws the
//! figures and tables, and follows the market's event stream.

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use haggle_api::EventType;
use haggle_domain::Tier;

use super::assets;
use crate::http::AppState;
use crate::http::error::ApiError;
use crate::http::extract::Id;
use crate::http::session;

/// What every page links.
pub struct Frame {
    pub console_js: String,
    pub console_css: String,
    pub uplot_js: String,
    pub uplot_css: String,
    pub uplot_license: String,
}

impl Default for Frame {
    fn default() -> Frame {
        Frame::new()
    }
}

impl Frame {
    pub fn new() -> Frame {
        Frame {
            console_js: assets::url("console.js"),
            console_css: assets::url("console.css"),
            uplot_js: assets::url("uplot-1.6.32.min.js"),
            uplot_css: assets::url("uplot-1.6.32.min.css"),
            uplot_license: assets::url("uplot-LICENSE.txt"),
        }
    }
}

#[derive(Template)]
#[template(path = "console/sign_in.html")]
pub struct SignIn<'a> {
    frame: Frame,
    error: Option<&'a str>,
    enabled: bool,
}

impl SignIn<'_> {
    pub fn page(state: &AppState, error: Option<&str>) -> Response {
        render(&SignIn { frame: Frame::new(), error, enabled: state.settings.admin_token.is_some() })
    }
}

/// Which page of the console, for its navigation and its script.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Market,
    Thread,
    Orders,
    Order,
    Agents,
    Webhooks,
    Health,
}

impl Section {
    pub fn name(self) -> &'static str {
        match self {
            Section::Market => "market",
            Section::Thread => "thread",
            Section::Orders => "orders",
            Section::Order => "order",
            Section::Agents => "agents",
            Section::Webhooks => "webhooks",
            Section::Health => "health",
        }
    }
}

#[derive(Template)]
#[template(path = "console/page.html")]
struct Page {
    frame: Frame,
    section: Section,
    title: String,
    /// The thread the page shows, on a thread's page.
    thread_id: String,
    event_types: String,
    tiers: Vec<&'static str>,
}

impl Page {
    fn new(section: Section, title: impl Into<String>) -> Page {
        Page {
            frame: Frame::new(),
            section,
            title: title.into(),
            thread_id: String::new(),
            event_types: event_types(),
            tiers: Tier::ALL.map(Tier::as_str).to_vec(),
        }
    }
}

/// A page for a signed-in operator; anyone else is sent to the sign-in form.
async fn signed_in(state: &AppState, headers: &HeaderMap, page: Page) -> Result<Response, ApiError> {
    match operator_signed_in(state, headers).await? {
        true => Ok(render(&page)),
        false => Ok(to_sign_in()),
    }
}

/// Whether the request carries an open console session.
pub async fn operator_signed_in(state: &AppState, headers: &HeaderMap) -> Result<bool, ApiError> {
    Ok(match session::session_id(headers) {
        Some(id) => session::is_open(state, id).await?,
        None => false,
    })
}

/// Where a visitor without a session is sent.
pub fn to_sign_in() -> Response {
    Redirect::to(super::SIGN_IN).into_response()
}

/// The event types the pages' stream listens for, as their `data-event-types`.
pub fn event_types() -> String {
    EventType::ALL.map(EventType::as_str).join(" ")
}

/// `GET /console`: the market at a glance.
pub async fn market(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    signed_in(&state, &headers, Page::new(Section::Market, "Market")).await
}

/// `GET /console/threads/{id}`: a negotiation and its price ladder.
pub async fn thread(State(state): State<AppState>, headers: HeaderMap, Id(id): Id) -> Result<Response, ApiError> {
    let mut page = Page::new(Section::Thread, "Negotiation");
    page.thread_id = id.to_string();
    signed_in(&state, &headers, page).await
}

/// `GET /console/agents`: agents, their tiers, suspension.
pub async fn agents(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    signed_in(&state, &headers, Page::new(Section::Agents, "Agents")).await
}

/// `GET /console/webhooks`: webhooks whose deliveries fail.
pub async fn webhooks(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    signed_in(&state, &headers, Page::new(Section::Webhooks, "Webhooks")).await
}

/// `GET /console/health`: readiness and the metrics.
pub async fn health(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    signed_in(&state, &headers, Page::new(Section::Health, "System health")).await
}

pub fn render(template: &impl Template) -> Response {
    match template.render() {
        Ok(html) => Html(html).into_response(),
        Err(error) => {
            tracing::error!(%error, "a console page could not be rendered");
            (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "error\n")
                .into_response()
        }
    }
}
