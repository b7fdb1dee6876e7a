//! The OpenAPI 3.1 document of the API, served at `/openapi.json`:
//! generated from the handlers' `#[utoipa::path]` attributes and the
//! request and response types' schema derives, so it says what the code
//! does. Every operation answers errors with the `Error` body (`default`).
//! Tests check that every route is in it and that real answers match it;
//! schemathesis checks the running server against it.

use utoipa::openapi::path::Operation;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Content, Ref, RefOr};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::error::ErrorBody;
use crate::{api, derived, ops, stream};

/// The document's source: every route's handler.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "cairn",
        description = "The HTTP API of a cairn store (`cairn serve`). Sessions are append-only logs; every view is derived from the log. Paths follow the Agent Protocol's threads where the concepts match: a session is a thread, its log the history, a fork a copy. Every request needs the server's bearer token; every error is an Error body with a code and a hint.",
        license(name = "MIT OR Apache-2.0"),
    ),
    paths(
        api::list, api::create, api::get_session, api::remove, api::append, api::history,
        derived::context, derived::state, derived::tree, derived::steps, derived::memory,
        derived::verdict,
        api::checkout, api::copy, api::label,
        ops::start, ops::current, ops::attempt, ops::reply, ops::dispatch, ops::result,
        ops::rerun, ops::request_approval, ops::resolve_approval, ops::deny, ops::queue_input,
        ops::finish, ops::recover,
        stream::tail, stream::listing,
    ),
    components(schemas(ErrorBody)),
    security(("bearer" = [])),
    modifiers(&Common),
)]
struct Document;

/// What every operation shares: the bearer scheme, and the `Error` body as
/// the answer to every error.
struct Common;

impl Modify for Common {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The server's token (`server-token` in the store's files directory, or --token). Browsers sign in with the form at / and send it as an HttpOnly cookie.",
                    ))
                    .build(),
            ),
        );
        components.responses.insert(
            "Error".to_owned(),
            RefOr::T(
                ResponseBuilder::new()
                    .description("An error.")
                    .content(
                        "application/json",
                        Content::new(Some(Ref::from_schema_name(ErrorBody::name()))),
                    )
                    .build(),
            ),
        );
        for item in doc.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.delete,
                &mut item.put,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                default_error(op);
            }
        }
    }
}

fn default_error(op: &mut Operation) {
    op.responses.responses.insert(
        "default".to_owned(),
        RefOr::Ref(Ref::new("#/components/responses/Error")),
    );
}

/// The document, as served.
pub fn document() -> utoipa::openapi::OpenApi {
    Document::openapi()
}
