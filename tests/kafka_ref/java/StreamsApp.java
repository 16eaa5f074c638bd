// Kafka Streams (4.4) as a referee: a word count that repartitions (selectKey) and keeps a state
// store with a changelog (count), run by tests/kafka_ref/test_streams_protocol.py against minibroker
// and the reference Kafka. Compiled by tests/kafka_ref/harness.py (javac, cached).
//
//   StreamsApp --bootstrap B --app-id A --input T --output T2 --state-dir D
//              [--prop KEY=VALUE ...] (e.g. group.protocol=streams,
//              processing.guarantee=exactly_once_v2)
//
// Each value of T is a word; T2 gets (word, count) as a string key and a long value. Prints one
// JSON object per line: {"state": "RUNNING"} at each state change, {"error": "..."} for an
// uncaught exception (the thread is replaced), {"hosts": "h:p=n,..."} when the instances known for
// interactive queries (application.server; n: their topic partitions) change. Closes when its
// stdin closes.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.Properties;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

public class StreamsApp {
    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String quote(String s) {
        return "\"" + String.valueOf(s).replace("\\", "\\\\").replace("\"", "\\\"")
                .replace("\n", " ") + "\"";
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        String input = null, output = null;
        for (int i = 0; i < args.length; i += 2) {
            String value = args[i + 1];
            switch (args[i]) {
                case "--bootstrap": props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, value); break;
                case "--app-id": props.put(StreamsConfig.APPLICATION_ID_CONFIG, value); break;
                case "--input": input = value; break;
                case "--output": output = value; break;
                case "--state-dir": props.put(StreamsConfig.STATE_DIR_CONFIG, value); break;
                case "--prop": {
                    int eq = value.indexOf('=');
                    props.put(value.substring(0, eq), value.substring(eq + 1));
                    break;
                }
                default: throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.putIfAbsent(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
               .selectKey((k, v) -> v)
               .groupByKey()
               .count()
               .toStream()
               .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> emit("{\"state\": " + quote(now.name()) + "}"));
        streams.setUncaughtExceptionHandler(e -> {
            emit("{\"error\": " + quote(e.toString()) + "}");
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        streams.start();
        // Interactive queries: the instances the broker's endpoint map names, when it changes.
        Thread metadata = new Thread(() -> {
            String last = "";
            while (true) {
                try {
                    Thread.sleep(500);
                    java.util.TreeSet<String> hosts = new java.util.TreeSet<>();
                    for (var m : streams.metadataForAllStreamsClients()) {
                        hosts.add(m.host() + ":" + m.port() + "=" + m.topicPartitions().size());
                    }
                    String now = String.join(",", hosts);
                    if (!now.equals(last)) {
                        emit("{\"hosts\": " + quote(now) + "}");
                        last = now;
                    }
                } catch (InterruptedException e) {
                    return;
                } catch (RuntimeException e) {
                    // not running yet
                }
            }
        });
        metadata.setDaemon(true);
        metadata.start();
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
        while (stdin.readLine() != null) {
            // nothing: stdin closing is the signal to stop
        }
        streams.close(Duration.ofSeconds(30));
        emit("{\"closed\": true}");
    }
}
