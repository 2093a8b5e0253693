//! The plans PostgreSQL makes for the server's statements, read for the tests that check which
//! indexes the hot statements use on tables it has no statistics for.

use sqlx::PgConnection;

/// The generic plan PostgreSQL makes for `statement`, as a connection that runs it on its
/// generic plan does (`EXPLAIN`'s text). The parameters' types are the ones the statement's
/// text implies (each is compared with a column or cast), and the plan is executed with each
/// parameter NULL: a generic plan does not depend on them.
pub async fn generic_plan(conn: &mut PgConnection, statement: &str) -> Result<String, sqlx::Error> {
    let nulls = vec!["NULL"; parameters(statement)].join(", ");
    // Built at run time: a statement with parameters is planned generically only when prepared
    // by name, which the simple protocol does.
    sqlx::raw_sql(&format!("SET plan_cache_mode = force_generic_plan; PREPARE haggle_plan_probe AS {statement}"))
        .execute(&mut *conn)
        .await?;
    let lines: Result<Vec<String>, _> = sqlx::query_scalar(&format!("EXPLAIN EXECUTE haggle_plan_probe({nulls})"))
        .persistent(false)
        .fetch_all(&mut *conn)
        .await;
    sqlx::raw_sql("DEALLOCATE haggle_plan_probe; RESET plan_cache_mode").execute(&mut *conn).await?;
    Ok(lines?.join("\n"))
}

/// The highest parameter number (`$n`) in `statement`.
fn parameters(statement: &str) -> usize {
    statement
        .split('$')
        .skip(1)
        .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse::<usize>().ok())
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_a_statements_parameters_by_the_highest_number() {
        assert_eq!(super::parameters("SELECT 1"), 0);
        assert_eq!(super::parameters("SELECT $2::int + $10 WHERE x = $1 AND y = '$'"), 10);
    }
}
