//! The schema and its embedded numbered migrations.
//!
//! cairn's tables live in one Postgres schema (`cairn` unless the URL says
//! `cairn_schema=…`). Its `migrations` table holds one row per applied
//! migration; migration *n* (1-based) takes the schema from version *n − 1*
//! to *n*. Migrating runs in one transaction that first takes a
//! transaction-level advisory lock (released at commit, so it is safe
//! behind PgBouncer), then re-reads the version: concurrent openers migrate
//! once. A schema whose version is greater than [`SCHEMA_VERSION`] was
//! written by a newer cairn-postgres and is refused unchanged; a schema of
//! that name holding other tables but no `migrations` table is refused too.

use postgres::types::Type;
use postgres::{Client, Transaction};

use crate::error::PgError;

/// The parameters both append functions (migrations 2 and 3) begin with:
/// the session, the fence and the summary after the append.
macro_rules! append_parameters {
    () => {
        "        p_sid bigint, p_token bigint, p_before bigint, p_lease float8,
        p_updated text, p_title text, p_first_message text, p_phase text, p_op_state text,
        p_entries bigint, p_records bigint, p_bytes bigint,
"
    };
}

/// The first step of both append functions (migrations 2 and 3): the fence
/// of invariant 11 — the session's row updated with the summary only if the
/// writer's token and lease hold and it still counts `p_before` records —
/// and `false` (nothing inserted) when it did not match.
macro_rules! append_fence {
    () => {
        r#"    BEGIN
        -- The fence, which also locks the session's row until commit.
        UPDATE {s}.sessions
           SET updated = greatest(p_updated COLLATE "C", created COLLATE "C"),
               title = p_title, first_message = p_first_message, phase = p_phase,
               op_state = p_op_state, entries = p_entries, records = p_records,
               bytes = p_bytes, lease_expires = now() + make_interval(secs => p_lease)
         WHERE sid = p_sid AND lease_token = p_token AND lease_expires > now()
           AND records = p_before;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
"#
    };
}

/// Migration *n* (1-based) brings a schema from version *n − 1* to *n*; `{s}`
/// is the schema's name. Never edit a released migration (nor the pieces
/// above that two of them share): append one.
const MIGRATIONS: &[&str] = &[
    // 1: sessions (with the writer lease), records. No index covers a
    // column every append changes (`updated`, the counts, the lease's
    // expiry), and the table keeps half of each page free, so the append's
    // update of the session's row is a HOT update: no index is written.
    "
    CREATE TABLE {s}.sessions (
        sid            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id             text    NOT NULL UNIQUE,
        header         text    NOT NULL,
        created        text    NOT NULL,
        updated        text    NOT NULL,
        title          text,
        first_message  text,
        forked_from    text,
        parent         text,
        phase          text    NOT NULL,
        op_state       text    NOT NULL,
        entries        bigint  NOT NULL,
        records        bigint  NOT NULL,
        bytes          bigint  NOT NULL,
        lease_token    bigint  NOT NULL DEFAULT 0,
        lease_expires  timestamptz,
        lease_acquired timestamptz,
        holder_pid     integer,
        holder_machine text,
        holder_boot    text,
        holder_pid_ns  text,
        holder_started bigint
    ) WITH (fillfactor = 50);
    CREATE INDEX sessions_by_fork ON {s}.sessions (forked_from) WHERE forked_from IS NOT NULL;
    CREATE INDEX sessions_by_parent ON {s}.sessions (parent) WHERE parent IS NOT NULL;
    CREATE INDEX sessions_with_open_operation ON {s}.sessions (sid)
        WHERE phase = '\"open\"';

    CREATE TABLE {s}.records (
        session bigint NOT NULL REFERENCES {s}.sessions (sid) ON DELETE CASCADE,
        seq     bigint NOT NULL,
        kind    text   NOT NULL,
        id      text,
        parent  text,
        crc     bigint NOT NULL,
        payload bytea  NOT NULL,
        writer  bigint NOT NULL,
        PRIMARY KEY (session, seq)
    );
    CREATE UNIQUE INDEX records_by_id ON {s}.records (session, id) WHERE id IS NOT NULL;
    ",
    // 2: the append as a function: the client sends one call (still an
    // unnamed statement, so it works behind a transaction pooler), and
    // PL/pgSQL plans its two statements once per connection instead of the
    // server parsing and planning one large statement at every append.
    // The core's persisted index of each session (a cache of its rows).
    concat!(
        r#"
    CREATE TABLE {s}.indexes (
        session bigint PRIMARY KEY REFERENCES {s}.sessions (sid) ON DELETE CASCADE,
        bytes   bytea  NOT NULL
    );
    CREATE FUNCTION {s}.append(
"#,
        append_parameters!(),
        r#"        p_seq bigint[], p_kind text[], p_id text[], p_parent text[], p_crc bigint[],
        p_payload bytea[]
    ) RETURNS boolean LANGUAGE plpgsql AS $fn$
"#,
        append_fence!(),
        r#"        INSERT INTO {s}.records (session, seq, kind, id, parent, crc, payload, writer)
        SELECT p_sid, u.seq, u.kind, u.id, u.parent, u.crc, u.payload, p_token
          FROM unnest(p_seq, p_kind, p_id, p_parent, p_crc, p_payload)
               AS u(seq, kind, id, parent, crc, payload);
        RETURN true;
    END
    $fn$;
    "#
    ),
    // 3: less server work per append. The foreign key of `records.session`
    // goes: its check ran one more query inside every append, and the
    // append's fence already finds and locks the session's row before any
    // record is inserted (no row, no insert). What its `ON DELETE CASCADE`
    // did, a row trigger on `sessions` does: deleting a session's row
    // deletes its records in the same statement, whoever deletes it (a
    // version-2 process still running deletes the row alone and counts on
    // the cascade). It fires on deletes only, so an append pays nothing.
    // `append_one` is the append of a single record (what one
    // `Session::append` writes) with plain parameters: no arrays to build,
    // send, parse and unnest. `append` stays for batches.
    concat!(
        r#"
    ALTER TABLE {s}.records DROP CONSTRAINT records_session_fkey;
    CREATE FUNCTION {s}.remove_records() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
        DELETE FROM {s}.records WHERE session = OLD.sid;
        RETURN NULL;
    END
    $fn$;
    CREATE TRIGGER sessions_remove_records AFTER DELETE ON {s}.sessions
        FOR EACH ROW EXECUTE FUNCTION {s}.remove_records();
    CREATE FUNCTION {s}.append_one(
"#,
        append_parameters!(),
        r#"        p_seq bigint, p_kind text, p_id text, p_parent text, p_crc bigint, p_payload bytea
    ) RETURNS boolean LANGUAGE plpgsql AS $fn$
"#,
        append_fence!(),
        r#"        INSERT INTO {s}.records (session, seq, kind, id, parent, crc, payload, writer)
        VALUES (p_sid, p_seq, p_kind, p_id, p_parent, p_crc, p_payload, p_token);
        RETURN true;
    END
    $fn$;
    "#
    ),
];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

fn pg(action: &'static str, schema: &str) -> impl Fn(postgres::Error) -> PgError {
    let schema = schema.to_owned();
    move |source| PgError::Postgres {
        action,
        location: format!("schema {schema}"),
        source,
    }
}

/// The applied version of `schema`: `None` when it has no `migrations`
/// table; an error when it holds other tables without one.
fn version(client: &mut Transaction<'_>, schema: &str) -> Result<i32, PgError> {
    let err = pg("read the schema version of", schema);
    let tables: Vec<String> = client
        .query_typed(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1",
            &[(&schema, Type::TEXT)],
        )
        .map_err(&err)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if tables.is_empty() {
        return Ok(0);
    }
    if !tables.iter().any(|t| t == "migrations") {
        return Err(PgError::NotCairn {
            schema: schema.to_owned(),
            why: format!(
                "it holds {} tables of another application and no cairn migrations table",
                tables.len()
            ),
        });
    }
    let v: Option<i32> = client
        .query_typed_one(
            &format!("SELECT max(version) FROM {schema}.migrations"),
            &[],
        )
        .map_err(&err)?
        .get(0);
    Ok(v.unwrap_or(0))
}

fn refuse_newer(schema: &str, found: i32) -> Result<(), PgError> {
    if found > SCHEMA_VERSION {
        return Err(PgError::NewerSchema {
            schema: schema.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Brings `schema` to [`SCHEMA_VERSION`], creating it if needed, or refuses it.
pub(crate) fn prepare(client: &mut Client, schema: &str) -> Result<(), PgError> {
    migrate(client, schema, MIGRATIONS)
}

/// Brings `schema` to the version of the last of `migrations`.
fn migrate(client: &mut Client, schema: &str, migrations: &[&str]) -> Result<(), PgError> {
    let err = pg("migrate", schema);
    let mut tx = client.transaction().map_err(&err)?;
    tx.batch_execute(&format!(
        "SELECT pg_advisory_xact_lock(hashtext('cairn migrations {schema}'))"
    ))
    .map_err(&err)?;
    let found = version(&mut tx, schema)?;
    refuse_newer(schema, found)?;
    let from = usize::try_from(found).unwrap_or(0);
    if from >= migrations.len() {
        return tx.rollback().map_err(&err);
    }
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.migrations (
             version integer PRIMARY KEY,
             applied timestamptz NOT NULL DEFAULT now()
         );"
    ))
    .map_err(&err)?;
    for (i, sql) in migrations.iter().enumerate().skip(from) {
        tx.batch_execute(&sql.replace("{s}", schema))
            .map_err(&err)?;
        tx.batch_execute(&format!(
            "INSERT INTO {schema}.migrations (version) VALUES ({})",
            i + 1
        ))
        .map_err(&err)?;
    }
    tx.commit().map_err(&err)
}

/// The applied version of `schema` (tests and tools).
pub(crate) fn applied(client: &mut Client, schema: &str) -> Result<i32, PgError> {
    let mut tx = client
        .transaction()
        .map_err(pg("read the schema version of", schema))?;
    version(&mut tx, schema)
}

#[cfg(test)]
mod tests {

    use std::sync::Arc;

    use cairn::{Access, Backend, EntryBody, FileBackend, Message, NewSession, Role, Store};

    use super::*;
    use crate::PostgresBackend;
    use crate::scratch::Scratch;

    #[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
    #[test]
    fn a_version_1_schema_migrates_and_its_sessions_append_through_the_function() {
        let Some(scratch) = Scratch::new("v1") else {
            return;
        };
        migrate(&mut scratch.raw(), &scratch.schema, &MIGRATIONS[..1]).unwrap();
        assert_eq!(applied(&mut scratch.raw(), &scratch.schema).unwrap(), 1);
        let backend = PostgresBackend::open(&scratch.url).unwrap();
        assert_eq!(backend.schema_version().unwrap(), SCHEMA_VERSION);
        let store = Store::with_backend(Arc::new(backend));
        let s = store.create(NewSession::default()).unwrap();
        s.append(EntryBody::Message(Message::text(Role::User, "hello")))
            .unwrap();
        let id = s.id().clone();
        drop(s);
        let again = store.open(&id, Access::Write).unwrap();
        assert_eq!(again.context().messages().len(), 1);
    }

    /// The lines of a session of `n` user messages, as the file backend
    /// writes them (header first).
    fn lines_of(n: usize) -> (cairn::SessionId, Vec<Vec<u8>>) {
        let dir = tempfile::tempdir().unwrap();
        let files = Arc::new(FileBackend::new(dir.path().to_path_buf()));
        let store = Store::with_backend(files.clone());
        let s = store.create(NewSession::default()).unwrap();
        for i in 0..n {
            s.append(EntryBody::Message(Message::text(
                Role::User,
                format!("m{i}"),
            )))
            .unwrap();
        }
        let id = s.id().clone();
        drop(s);
        let lines = files.stored_lines(&id).unwrap();
        (id, lines)
    }

    fn foreign_keys_of_records(c: &mut Client, schema: &str) -> i64 {
        c.query_one(
            &format!(
                "SELECT count(*) FROM pg_constraint
                  WHERE conrelid = '{schema}.records'::regclass AND contype = 'f'"
            ),
            &[],
        )
        .unwrap()
        .get(0)
    }

    #[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
    #[test]
    fn a_version_2_schema_holding_sessions_migrates_to_3_and_reads_them_byte_for_byte() {
        let (Some(old), Some(src)) = (Scratch::new("v2"), Scratch::new("v2src")) else {
            return;
        };
        // The rows as cairn writes them (their shape is the same at versions
        // 2 and 3), made in a scratch schema of their own: one session
        // written by one batch of several records and single appends, one by
        // `Session::append`s.
        let writer = PostgresBackend::open(&src.url).unwrap();
        let (batched, lines) = lines_of(6);
        let log = writer.create(&batched, &lines[0]).unwrap();
        log.append(&lines[1..5]).unwrap();
        log.append(&lines[5..6]).unwrap();
        log.append(&lines[6..7]).unwrap();
        drop(log);
        let store = Store::with_backend(Arc::new(writer));
        let s = store.create(NewSession::default()).unwrap();
        for i in 0..3 {
            s.append(EntryBody::Message(Message::text(
                Role::User,
                format!("s{i}"),
            )))
            .unwrap();
        }
        let single = s.id().clone();
        drop(s);
        // A version-2 schema holding them.
        migrate(&mut old.raw(), &old.schema, &MIGRATIONS[..2]).unwrap();
        let mut raw = old.raw();
        let (o, n) = (&old.schema, &src.schema);
        raw.batch_execute(&format!(
            "INSERT INTO {o}.sessions OVERRIDING SYSTEM VALUE SELECT * FROM {n}.sessions;
             INSERT INTO {o}.records SELECT * FROM {n}.records;
             INSERT INTO {o}.indexes SELECT * FROM {n}.indexes;"
        ))
        .unwrap();
        assert_eq!(applied(&mut raw, o).unwrap(), 2);
        assert_eq!(foreign_keys_of_records(&mut raw, o), 1);

        let backend = Arc::new(PostgresBackend::open(&old.url).unwrap());
        assert_eq!(backend.schema_version().unwrap(), 3);
        assert_eq!(foreign_keys_of_records(&mut raw, o), 0);
        assert_eq!(backend.stored_lines(&batched).unwrap(), lines);
        let source = PostgresBackend::open(&src.url).unwrap();
        assert_eq!(
            backend.stored_lines(&single).unwrap(),
            source.stored_lines(&single).unwrap()
        );
        // Both open, continue, and are removed with their records.
        let store = Store::with_backend(backend.clone());
        for (id, before) in [(&batched, 6), (&single, 3)] {
            let s = store.open(id, Access::Write).unwrap();
            assert_eq!(s.context().messages().len(), before);
            s.append(EntryBody::Message(Message::text(Role::User, "after")))
                .unwrap();
            drop(s);
            let again = store.open(id, Access::Read).unwrap();
            assert_eq!(again.context().messages().len(), before + 1);
            drop(again);
            backend.remove(id).unwrap();
        }
        let left: i64 = raw
            .query_one(&format!("SELECT count(*) FROM {o}.records"), &[])
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "removing the sessions removed their records");
    }

    #[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
    #[test]
    fn a_session_deleted_by_a_version_2_process_leaves_no_records() {
        let Some(scratch) = Scratch::new("v2delete") else {
            return;
        };
        let backend = Arc::new(PostgresBackend::open(&scratch.url).unwrap());
        assert_eq!(backend.schema_version().unwrap(), 3);
        let store = Store::with_backend(backend.clone());
        let mut ids = Vec::new();
        for n in 0..2 {
            let s = store.create(NewSession::default()).unwrap();
            for i in 0..3 {
                s.append(EntryBody::Message(Message::text(
                    Role::User,
                    format!("{n}.{i}"),
                )))
                .unwrap();
            }
            ids.push(s.id().clone());
        }
        let (gone, kept) = (ids[0].to_string(), &ids[1]);
        let kept_lines = backend.stored_lines(kept).unwrap();
        // A version-2 cairn still running removes a session by deleting its
        // row alone, counting on the foreign key's cascade for its records.
        let mut raw = scratch.raw();
        let o = &scratch.schema;
        let deleted = raw
            .execute(&format!("DELETE FROM {o}.sessions WHERE id = $1"), &[&gone])
            .unwrap();
        assert_eq!(deleted, 1);
        let count = |raw: &mut Client, filter: &str| -> i64 {
            raw.query_one(&format!("SELECT count(*) FROM {o}.records {filter}"), &[])
                .unwrap()
                .get(0)
        };
        let orphans = count(
            &mut raw,
            &format!("WHERE session NOT IN (SELECT sid FROM {o}.sessions)"),
        );
        assert_eq!(orphans, 0, "the deleted session's records are gone");
        // The other session's header and three messages are all that is left.
        assert_eq!(count(&mut raw, ""), 4);
        assert_eq!(backend.stored_lines(kept).unwrap(), kept_lines);
    }
}
