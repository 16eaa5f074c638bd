// Kafka's Java client (4.4) as a referee: the small programs tests/kafka_ref/test_java_client.py
// runs against minibroker and the reference Kafka. Compiled by tests/kafka_ref/harness.py (javac,
// cached). Each prints one JSON object per line on stdout; the test reads them.
//
//   Referee produce --bootstrap B --topic T --count N [--partitions P] [--pace-every K]
//       an idempotent producer (acks=all): value i to partition i % P, key "k" + i; prints
//       {"acked": n} every 100 acknowledgements and at the end; exit 1 on a send error.
//   Referee copy --bootstrap B --input T --output T2 --group G --transactional-id ID --expect N
//       a consume-transform-produce copier: read_committed, classic group, one transaction per poll
//       with sendOffsetsToTransaction(positions, groupMetadata); value v -> v + ":copied". A
//       timed-out commit or abort is retried; another KafkaException aborts and rewinds to the
//       committed offsets; fencing and sequence errors are fatal (exit 3). Ends once N records are
//       committed: {"committed": N, "txns": t, "aborts": a}.
//   Referee member --bootstrap B --topic T --group G
//       a classic-protocol group member (--prop group.protocol=consumer: KIP-848's): prints {"assigned": [...]} / {"revoked": [...]} and
//       {"record": "p@offset"} per record, commits synchronously after each poll and on revocation,
//       leaves the group when its stdin closes.
// Every command takes --prop KEY=VALUE (any client property) and --timeout-s S (default 120).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class Referee {
    private final Map<String, String> args = new HashMap<>();
    private final Properties extra = new Properties();

    private Referee(String[] argv) {
        for (int i = 1; i < argv.length; i += 2) {
            String key = argv[i].replaceFirst("^--", "");
            String value = argv[i + 1];
            if (key.equals("prop")) {
                int eq = value.indexOf('=');
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

    private long num(String name, long fallback) {
        return args.containsKey(name) ? Long.parseLong(args.get(name)) : fallback;
    }

    private static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    private static String partitions(Collection<TopicPartition> parts) {
        TreeSet<Integer> sorted = new TreeSet<>();
        for (TopicPartition tp : parts) sorted.add(tp.partition());
        return sorted.toString().replace(" ", "");
    }

    private Properties common() {
        Properties props = new Properties();
        props.put("bootstrap.servers", arg("bootstrap"));
        props.putAll(extra);
        return props;
    }

    private KafkaProducer<String, String> producer(String transactionalId) {
        Properties props = common();
        props.put("enable.idempotence", "true");
        props.put("acks", "all");
        if (transactionalId != null) props.put("transactional.id", transactionalId);
        props.putAll(extra);
        return new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
    }

    private KafkaConsumer<String, String> consumer(String group) {
        Properties props = common();
        props.put("group.id", group);
        props.put("group.protocol", "classic");
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("isolation.level", "read_committed");
        if (!"consumer".equals(extra.getProperty("group.protocol"))) {
            // the consumer protocol (KIP-848) refuses these: the broker sets them
            props.put("session.timeout.ms", "6000");
            props.put("heartbeat.interval.ms", "500");
        }
        props.putAll(extra);
        return new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
    }

    private int produce() throws Exception {
        String topic = arg("topic");
        long count = num("count", 1000);
        int parts = (int) num("partitions", 1);
        long paceEvery = num("pace-every", 0);
        AtomicLong acked = new AtomicLong();
        AtomicReference<Exception> failed = new AtomicReference<>();
        try (KafkaProducer<String, String> producer = producer(null)) {
            for (long i = 0; i < count && failed.get() == null; i++) {
                producer.send(new ProducerRecord<>(topic, (int) (i % parts), "k" + i, Long.toString(i)),
                    (meta, error) -> {
                        if (error != null) {
                            failed.compareAndSet(null, error);
                        } else if (acked.incrementAndGet() % 100 == 0) {
                            emit("{\"acked\": " + acked.get() + "}");
                        }
                    });
                if (paceEvery > 0 && i % paceEvery == paceEvery - 1) Thread.sleep(10);
            }
            producer.flush();
        }
        if (failed.get() != null) {
            emit("{\"error\": " + quote(failed.get().toString()) + "}");
            return 1;
        }
        emit("{\"acked\": " + acked.get() + ", \"done\": true}");
        return 0;
    }

    private static void rewind(KafkaConsumer<String, String> consumer) {
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(consumer.assignment());
        for (TopicPartition tp : consumer.assignment()) {
            OffsetAndMetadata at = committed.get(tp);
            if (at != null) consumer.seek(tp, at.offset());
            else consumer.seekToBeginning(List.of(tp));
        }
    }

    private int copy() throws Exception {
        String output = arg("output");
        long expect = num("expect", 0);
        long deadline = System.nanoTime() + num("timeout-s", 120) * 1_000_000_000L;
        long committed = 0, txns = 0, aborts = 0;
        try (KafkaConsumer<String, String> consumer = consumer(arg("group"));
             KafkaProducer<String, String> producer = producer(arg("transactional-id"))) {
            consumer.subscribe(List.of(arg("input")));
            producer.initTransactions();
            while (committed < expect) {
                if (System.nanoTime() > deadline) {
                    emit("{\"error\": \"timed out\", \"committed\": " + committed + "}");
                    return 2;
                }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) continue;
                try {
                    producer.beginTransaction();
                    for (ConsumerRecord<String, String> r : records) {
                        producer.send(new ProducerRecord<>(output, r.partition(), r.key(), r.value() + ":copied"));
                    }
                    Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
                    for (TopicPartition tp : consumer.assignment()) {
                        positions.put(tp, new OffsetAndMetadata(consumer.position(tp)));
                    }
                    producer.sendOffsetsToTransaction(positions, consumer.groupMetadata());
                    while (true) {
                        try {
                            producer.commitTransaction();
                            break;
                        } catch (TimeoutException e) {
                            emit("{\"retry\": \"commit\", \"error\": " + quote(e.toString()) + "}");
                        }
                    }
                    committed += records.count();
                    txns++;
                    emit("{\"committed\": " + committed + ", \"txns\": " + txns + "}");
                } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException
                         | UnsupportedVersionException e) {
                    emit("{\"fatal\": " + quote(e.toString()) + "}");
                    return 3;
                } catch (KafkaException e) {
                    aborts++;
                    emit("{\"abort\": " + quote(e.toString()) + "}");
                    while (true) {
                        try {
                            producer.abortTransaction();
                            break;
                        } catch (TimeoutException again) {
                            emit("{\"retry\": \"abort\", \"error\": " + quote(again.toString()) + "}");
                        }
                    }
                    rewind(consumer);
                }
            }
        }
        emit("{\"committed\": " + committed + ", \"txns\": " + txns + ", \"aborts\": " + aborts
             + ", \"done\": true}");
        return 0;
    }

    private int member() throws Exception {
        AtomicBoolean stopping = new AtomicBoolean();
        KafkaConsumer<String, String> consumer = consumer(arg("group"));
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                while (in.readLine() != null) { /* until EOF */ }
            } catch (Exception ignored) {
                // EOF or a broken pipe: stop all the same
            }
            stopping.set(true);
            consumer.wakeup();
        });
        stdin.setDaemon(true);
        stdin.start();
        consumer.subscribe(List.of(arg("topic")), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                if (!parts.isEmpty()) {
                    try {
                        consumer.commitSync();
                    } catch (WakeupException e) {
                        consumer.commitSync();
                    }
                }
                emit("{\"revoked\": " + partitions(parts) + "}");
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                emit("{\"assigned\": " + partitions(parts) + "}");
            }
        });
        try {
            while (!stopping.get()) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                List<String> seen = new ArrayList<>();
                for (ConsumerRecord<String, String> r : records) seen.add(r.partition() + "@" + r.offset());
                for (String s : seen) emit("{\"record\": " + quote(s) + "}");
                if (!records.isEmpty()) consumer.commitSync();
            }
        } catch (WakeupException e) {
            // stdin closed
        } finally {
            consumer.close();
        }
        emit("{\"left\": true}");
        return 0;
    }

    public static void main(String[] argv) throws Exception {
        Referee r = new Referee(argv);
        int code;
        switch (argv[0]) {
            case "produce": code = r.produce(); break;
            case "copy": code = r.copy(); break;
            case "member": code = r.member(); break;
            default: throw new IllegalArgumentException("unknown command " + argv[0]);
        }
        System.exit(code);
    }
}
