// Connects to the emulator's TDS server through Microsoft's JDBC driver (mssql-jdbc) as JVM tools
// do (DBeaver, DataGrip, Spark's JDBC source), and prints what they would see as one JSON object.
// Compiled and run by cdc_assets_tests/tds_server/test_jdbc.py (the jar: scripts/install_jars.sh).
//
//   java -cp mssql-jdbc.jar:<classes> JdbcProbe meta <url> <catalog> <schema.table>...
//     DatabaseMetaData: product, getTables, getTypeInfo, and for each table getColumns,
//     getPrimaryKeys, getIndexInfo, getImportedKeys; every result set as {columns, rows}, or
//     {error, code} for a call that failed.
//   java -cp ... JdbcProbe tx <url> <update sql> <select sql> <key> <first value> <second value>
//     autocommit off: UPDATE (first value), read back, rollback, read again; UPDATE (second
//     value), commit; then read from a new connection. Both statements take (value, key) / (key).
//
// A failure prints {"error": ..., "sqlstate": ..., "code": ...} and exits with status 2.

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

public final class JdbcProbe {
    private JdbcProbe() {}

    public static void main(String[] args) throws Exception {
        try {
            String out = switch (args[0]) {
                case "meta" -> meta(args);
                case "savepoint" -> savepoint(args);
                default -> transaction(args);
            };
            System.out.println(out);
        } catch (SQLException e) {
            System.out.println("{\"error\": " + quote(String.valueOf(e.getMessage()))
                    + ", \"sqlstate\": " + quote(e.getSQLState())
                    + ", \"code\": " + e.getErrorCode() + "}");
            System.exit(2);
        }
    }

    private static String meta(String[] args) throws SQLException {
        String url = args[1];
        String catalog = args[2];
        StringBuilder json = new StringBuilder("{");
        try (Connection conn = DriverManager.getConnection(url)) {
            DatabaseMetaData md = conn.getMetaData();
            json.append("\"product\": [").append(quote(md.getDatabaseProductName())).append(", ")
                    .append(quote(md.getDatabaseProductVersion())).append(", ")
                    .append(quote(md.getDriverVersion())).append("]");
            json.append(", \"catalog\": ").append(quote(conn.getCatalog()));
            json.append(", \"tables\": ").append(dump(() -> md.getTables(catalog, null, "%", null)));
            json.append(", \"user_tables\": ")
                    .append(dump(() -> md.getTables(null, "dbo", "%", new String[] {"TABLE"})));
            json.append(", \"type_info\": ").append(dump(md::getTypeInfo));
            json.append(", \"by_table\": {");
            for (int i = 3; i < args.length; i++) {
                String[] parts = args[i].split("\\.", 2);
                String schema = parts[0];
                String table = parts[1];
                if (i > 3) {
                    json.append(", ");
                }
                json.append(quote(args[i])).append(": {");
                json.append("\"columns\": ").append(dump(() -> md.getColumns(catalog, schema, table, "%")));
                json.append(", \"primary_keys\": ")
                        .append(dump(() -> md.getPrimaryKeys(catalog, schema, table)));
                json.append(", \"index_info\": ")
                        .append(dump(() -> md.getIndexInfo(catalog, schema, table, false, false)));
                json.append(", \"imported_keys\": ")
                        .append(dump(() -> md.getImportedKeys(catalog, schema, table)));
                json.append("}");
            }
            json.append("}");
            json.append(", \"catalog_after\": ").append(quote(conn.getCatalog()));
        }
        return json.append("}").toString();
    }

    private static String transaction(String[] args) throws SQLException {
        String url = args[1];
        String update = args[2];
        String select = args[3];
        int key = Integer.parseInt(args[4]);
        String first = args[5];
        String second = args[6];
        StringBuilder json = new StringBuilder("{");
        try (Connection conn = DriverManager.getConnection(url)) {
            json.append("\"before\": ").append(quote(read(conn, select, key)));
            conn.setAutoCommit(false);
            json.append(", \"updated\": ").append(write(conn, update, first, key));
            json.append(", \"inside\": ").append(quote(read(conn, select, key)));
            json.append(", \"trancount_inside\": ").append(quote(read(conn, "SELECT @@TRANCOUNT", null)));
            conn.rollback();
            json.append(", \"after_rollback\": ").append(quote(read(conn, select, key)));
            json.append(", \"updated_again\": ").append(write(conn, update, second, key));
            conn.commit();
            json.append(", \"after_commit\": ").append(quote(read(conn, select, key)));
            conn.setAutoCommit(true);
            json.append(", \"trancount_after\": ").append(quote(read(conn, "SELECT @@TRANCOUNT", null)));
        }
        try (Connection other = DriverManager.getConnection(url)) {
            json.append(", \"other_connection\": ").append(quote(read(other, select, key)));
        }
        return json.append("}").toString();
    }

    /**
     * setSavepoint / rollback(savepoint) with autocommit off: the first update stays, the second
     * is undone, the transaction stays open until commit.
     */
    private static String savepoint(String[] args) throws SQLException {
        String url = args[1];
        String update = args[2];
        String select = args[3];
        int key = Integer.parseInt(args[4]);
        StringBuilder json = new StringBuilder("{");
        try (Connection conn = DriverManager.getConnection(url)) {
            conn.setAutoCommit(false);
            json.append("\"updated\": ").append(write(conn, update, args[5], key));
            Savepoint savepoint = conn.setSavepoint("before_second");
            json.append(", \"trancount_at_savepoint\": ")
                    .append(quote(read(conn, "SELECT @@TRANCOUNT", null)));
            json.append(", \"updated_again\": ").append(write(conn, update, args[6], key));
            json.append(", \"inside\": ").append(quote(read(conn, select, key)));
            conn.rollback(savepoint);
            json.append(", \"after_rollback_to_savepoint\": ").append(quote(read(conn, select, key)));
            json.append(", \"trancount_after_rollback_to_savepoint\": ")
                    .append(quote(read(conn, "SELECT @@TRANCOUNT", null)));
            Savepoint unnamed = conn.setSavepoint();
            json.append(", \"updated_third\": ").append(write(conn, update, args[7], key));
            conn.rollback(unnamed);
            json.append(", \"after_unnamed_rollback\": ").append(quote(read(conn, select, key)));
            conn.commit();
            conn.setAutoCommit(true);
            json.append(", \"trancount_after_commit\": ")
                    .append(quote(read(conn, "SELECT @@TRANCOUNT", null)));
        }
        try (Connection other = DriverManager.getConnection(url)) {
            json.append(", \"other_connection\": ").append(quote(read(other, select, key)));
        }
        return json.append("}").toString();
    }

    private static int write(Connection conn, String sql, String value, int key) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
            ps.setString(1, value);
            ps.setInt(2, key);
            return ps.executeUpdate();
        }
    }

    private static String read(Connection conn, String sql, Integer key) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
            if (key != null) {
                ps.setInt(1, key);
            }
            try (ResultSet rs = ps.executeQuery()) {
                return rs.next() ? rs.getString(1) : null;
            }
        }
    }

    /** A catalog call that returns a result set. */
    private interface Call {
        ResultSet run() throws SQLException;
    }

    /**
     * The result set as {"columns": [label...], "rows": [[value...]...]}, read by position, or
     * {"error": ..., "code": ...} when the call fails.
     */
    private static String dump(Call call) throws SQLException {
        ResultSet result;
        try {
            result = call.run();
        } catch (SQLException e) {
            return "{\"error\": " + quote(String.valueOf(e.getMessage())) + ", \"code\": "
                    + e.getErrorCode() + "}";
        }
        try (ResultSet rs = result) {
            ResultSetMetaData md = rs.getMetaData();
            int n = md.getColumnCount();
            List<String> labels = new ArrayList<>();
            for (int i = 1; i <= n; i++) {
                labels.add(quote(md.getColumnLabel(i)));
            }
            StringBuilder json = new StringBuilder("{\"columns\": [");
            json.append(String.join(", ", labels)).append("], \"rows\": [");
            boolean firstRow = true;
            while (rs.next()) {
                json.append(firstRow ? "[" : ", [");
                firstRow = false;
                for (int i = 1; i <= n; i++) {
                    if (i > 1) {
                        json.append(", ");
                    }
                    Object value = rs.getObject(i);
                    if (value == null) {
                        json.append("null");
                    } else if (value instanceof Number && !(value instanceof java.math.BigDecimal)) {
                        json.append(value);
                    } else if (value instanceof Boolean) {
                        json.append(value);
                    } else {
                        json.append(quote(value.toString()));
                    }
                }
                json.append("]");
            }
            return json.append("]}").toString();
        }
    }

    private static String quote(String text) {
        if (text == null) {
            return "null";
        }
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }
}
