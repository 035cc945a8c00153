// Debezium's embedded engine with its SQL Server connector, run against a served emulator database
// (cdc_assets_tests/support/debezium_probe.py starts it). Each change event is written to the
// output file as one JSON line, flushed at once: {"key": ..., "value": ..., "received_ms": ...}
// (key and value as Debezium's JSON converter writes them, without schemas). The engine stops
// when standard input closes or says "stop"; offsets and schema history are files in the work
// folder (no Kafka). Usage:
//   java -cp <jars-debezium>/*:<classes> DebeziumProbe HOST PORT DATABASE USER PASSWORD
//        TABLES(schema.table,...) WORK_DIR OUTPUT_FILE
import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;
import java.io.BufferedReader;
import java.io.FileWriter;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

public final class DebeziumProbe {
    public static void main(String[] args) throws Exception {
        Path work = Path.of(args[6]);
        Properties props = new Properties();
        props.setProperty("name", "cdc-assets-probe");
        props.setProperty("connector.class", "io.debezium.connector.sqlserver.SqlServerConnector");
        props.setProperty("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore");
        props.setProperty("offset.storage.file.filename", work.resolve("offsets.dat").toString());
        props.setProperty("offset.flush.interval.ms", "1000");
        props.setProperty("schema.history.internal", "io.debezium.storage.file.history.FileSchemaHistory");
        props.setProperty("schema.history.internal.file.filename", work.resolve("history.dat").toString());
        props.setProperty("database.hostname", args[0]);
        props.setProperty("database.port", args[1]);
        props.setProperty("database.names", args[2]);
        props.setProperty("database.user", args[3]);
        props.setProperty("database.password", args[4]);
        props.setProperty("database.encrypt", "true");
        props.setProperty("database.trustServerCertificate", "true");
        props.setProperty("topic.prefix", "emu");
        props.setProperty("table.include.list", args[5]);
        props.setProperty("snapshot.mode", "initial");
        props.setProperty("poll.interval.ms", "100");
        props.setProperty("tombstones.on.delete", "false");
        // values in forms a comparison can read back exactly
        props.setProperty("decimal.handling.mode", "string");
        props.setProperty("binary.handling.mode", "hex");
        props.setProperty("time.precision.mode", "isostring");  // 0001-01-01 too (adaptive overflows)
        props.setProperty("key.converter.schemas.enable", "false");
        props.setProperty("value.converter.schemas.enable", "false");
        for (String extra : System.getProperty("probe.extra", "").split(";")) {
            int eq = extra.indexOf('=');
            if (eq > 0) {
                props.setProperty(extra.substring(0, eq), extra.substring(eq + 1));
            }
        }
        PrintWriter out = new PrintWriter(new FileWriter(args[7], true));
        Object lock = new Object();
        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                .using(props)
                .notifying(event -> {
                    if (event.value() == null) {
                        return;
                    }
                    String line = "{\"received_ms\":" + System.currentTimeMillis()
                            + ",\"destination\":\"" + event.destination() + "\""
                            + ",\"key\":" + event.key() + ",\"value\":" + event.value() + "}";
                    synchronized (lock) {
                        out.println(line);
                        out.flush();
                    }
                })
                .using((success, message, error) -> {
                    synchronized (lock) {
                        String text = message == null ? "" : message.replace("\\", "\\\\").replace("\"", "\\\"")
                                .replace("\n", " ");
                        String cause = "";
                        if (error != null) {
                            Throwable root = error;
                            while (root.getCause() != null) {
                                root = root.getCause();
                            }
                            cause = String.valueOf(root).replace("\\", "\\\\").replace("\"", "\\\"")
                                    .replace("\n", " ");
                        }
                        out.println("{\"completed\":" + success + ",\"message\":\"" + text
                                + "\",\"cause\":\"" + cause + "\"}");
                        out.flush();
                    }
                })
                .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        executor.execute(engine);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String command;
        while ((command = in.readLine()) != null && !command.trim().equals("stop")) {
            // anything else is ignored
        }
        engine.close();
        executor.shutdown();
        executor.awaitTermination(60, TimeUnit.SECONDS);
        out.close();
        System.exit(0);
    }
}
