// Back-to-back transactions with Kafka's Java client (4.4), for bench/java_tools.py's txnloop cell.
// Compiled by the bench (javac against the kafka-clients jar of tests/kafka_ref, cached by this
// file's hash); not part of the product.
//
//   TxnLoop --bootstrap B --topic T --transactional-id ID --transactions N [--warmup W]
//           [--record-size S] [--group G] [--prop KEY=VALUE ...]
//
// One transactional producer (the client's defaults otherwise: acks=all, idempotent, linger.ms
// 5, which commitTransaction does not wait for: it flushes). initTransactions, then W untimed
// transactions, then N timed ones, each: beginTransaction, send one record of S bytes (default
// 100) to partition 0 of T, with --group also sendOffsetsToTransaction (offset i of T's partition
// 0 for group G), commitTransaction.
//
// It talks with the bench on stdin/stdout so that the broker's CPU is read around the timed part
// alone: it prints "ready" after the warm-up and waits for a line on stdin; then runs the timed
// transactions and prints one line
//     result transactions=N seconds=S commit_p50_ms=.. commit_p99_ms=.. commit_p999_ms=..
//            txn_p50_ms=.. txn_p99_ms=.. txn_p999_ms=..
// (commit_*: commitTransaction alone; txn_*: beginTransaction to commitTransaction returned),
// waits for another line on stdin, closes the producer and exits 0. Any error: a message on
// stderr and exit 1.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnLoop {
    private final Map<String, String> args = new HashMap<>();
    private final Properties extra = new Properties();

    private TxnLoop(String[] argv) {
        if (argv.length % 2 != 0) throw new IllegalArgumentException("options come in pairs");
        for (int i = 0; i < argv.length; i += 2) {
            String key = argv[i].replaceFirst("^--", "");
            String value = argv[i + 1];
            if (key.equals("prop")) {
                int eq = value.indexOf('=');
                if (eq < 1) throw new IllegalArgumentException("--prop wants KEY=VALUE: " + value);
                extra.put(value.substring(0, eq), value.substring(eq + 1));
            } else {
                args.put(key, value);
            }
        }
    }

    private String arg(String name) {
        String value = args.get(name);
        if (value == null) throw new IllegalArgumentException("missing --" + name);
        return value;
    }

    private int num(String name, int fallback) {
        return args.containsKey(name) ? Integer.parseInt(args.get(name)) : fallback;
    }

    private static String percentile(long[] sortedNanos, double q) {
        if (sortedNanos.length == 0) return "nan";
        int index = (int) Math.ceil(q * sortedNanos.length) - 1;
        index = Math.max(0, Math.min(sortedNanos.length - 1, index));
        return String.format(Locale.ROOT, "%.3f", sortedNanos[index] / 1e6);
    }

    private static void awaitLine(BufferedReader in) throws Exception {
        if (in.readLine() == null) throw new IllegalStateException("stdin closed");
    }

    private void run() throws Exception {
        String topic = arg("topic");
        int transactions = num("transactions", 1000);
        int warmup = num("warmup", 100);
        byte[] value = new byte[num("record-size", 100)];
        Arrays.fill(value, (byte) 'x');
        String group = args.get("group");

        Properties props = new Properties();
        props.put("bootstrap.servers", arg("bootstrap"));
        props.put("transactional.id", arg("transactional-id"));
        props.putAll(extra);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        TopicPartition partition = new TopicPartition(topic, 0);
        ConsumerGroupMetadata groupMetadata = group == null ? null : new ConsumerGroupMetadata(group);
        long[] commitNanos = new long[transactions];
        long[] txnNanos = new long[transactions];

        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            long offset = 0;
            for (int i = 0; i < warmup; i++) {
                producer.beginTransaction();
                producer.send(new ProducerRecord<>(topic, 0, null, value));
                if (groupMetadata != null) {
                    producer.sendOffsetsToTransaction(
                        Map.of(partition, new OffsetAndMetadata(offset++)), groupMetadata);
                }
                producer.commitTransaction();
            }
            System.out.println("ready");
            System.out.flush();
            awaitLine(in);

            long started = System.nanoTime();
            for (int i = 0; i < transactions; i++) {
                long begin = System.nanoTime();
                producer.beginTransaction();
                producer.send(new ProducerRecord<>(topic, 0, null, value));
                if (groupMetadata != null) {
                    producer.sendOffsetsToTransaction(
                        Map.of(partition, new OffsetAndMetadata(offset++)), groupMetadata);
                }
                long commit = System.nanoTime();
                producer.commitTransaction();
                long end = System.nanoTime();
                commitNanos[i] = end - commit;
                txnNanos[i] = end - begin;
            }
            double seconds = (System.nanoTime() - started) / 1e9;
            Arrays.sort(commitNanos);
            Arrays.sort(txnNanos);
            System.out.println(String.format(Locale.ROOT, "result transactions=%d seconds=%.3f", transactions, seconds)
                + " commit_p50_ms=" + percentile(commitNanos, 0.50)
                + " commit_p99_ms=" + percentile(commitNanos, 0.99)
                + " commit_p999_ms=" + percentile(commitNanos, 0.999)
                + " txn_p50_ms=" + percentile(txnNanos, 0.50)
                + " txn_p99_ms=" + percentile(txnNanos, 0.99)
                + " txn_p999_ms=" + percentile(txnNanos, 0.999));
            System.out.flush();
            awaitLine(in);
            producer.close(Duration.ofSeconds(30));
        }
    }

    public static void main(String[] argv) {
        try {
            new TxnLoop(argv).run();
        } catch (Exception e) {
            System.err.println("TxnLoop: " + e);
            e.printStackTrace(System.err);
            System.exit(1);
        }
        System.exit(0);
    }
}
