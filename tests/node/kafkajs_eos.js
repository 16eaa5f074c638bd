// kafkajs against minibroker: an idempotent producer, then an exactly-once copier (a consumer
// group reading read_committed, a transactional producer sending offsets with its output), an
// aborted transaction, and a read_committed check of the output. Prints one JSON line.
// Usage: node kafkajs_eos.js HOST:PORT SUFFIX
const { Kafka, logLevel } = require("kafkajs");

const [broker, suffix] = process.argv.slice(2);
const input = `js-in-${suffix}`;
const output = `js-out-${suffix}`;
const kafka = new Kafka({ clientId: "kafkajs-test", brokers: [broker], logLevel: logLevel.NOTHING,
                          retry: { retries: 8 } });
const COUNT = 20;

async function readAll(groupId, topic, want, isolation) {
  const consumer = kafka.consumer({ groupId, readUncommitted: isolation === "uncommitted",
                                    sessionTimeout: 30000, rebalanceTimeout: 30000 });
  const seen = [];
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let done;
  const finished = new Promise((resolve) => { done = resolve; });
  const timer = setTimeout(() => done(), 25000);
  await consumer.run({
    eachMessage: async ({ message }) => {
      seen.push(message.value.toString());
      if (seen.length >= want) done();
    },
  });
  await finished;
  clearTimeout(timer);
  // a short grace period: anything more (aborted data) would show up here
  await new Promise((r) => setTimeout(r, 1000));
  await consumer.disconnect();
  return seen;
}

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic: input, numPartitions: 2 }, { topic: output, numPartitions: 2 }] });
  await admin.disconnect();

  // 1. idempotent producer (InitProducerId without a transactional id)
  const idem = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await idem.connect();
  for (let i = 0; i < COUNT; i++) {
    await idem.send({ topic: input, acks: -1, messages: [{ key: `k${i % 4}`, value: `v${i}` }] });
  }
  await idem.disconnect();

  // 2. exactly-once copy: consume read_committed, produce + send offsets in one transaction
  const txProducer = kafka.producer({ transactionalId: `copier-${suffix}`, idempotent: true,
                                      maxInFlightRequests: 1 });
  await txProducer.connect();
  const groupId = `copier-group-${suffix}`;
  const copier = kafka.consumer({ groupId, sessionTimeout: 30000, rebalanceTimeout: 30000 });
  await copier.connect();
  await copier.subscribe({ topic: input, fromBeginning: true });
  let copied = 0;
  let allCopied;
  const copiedAll = new Promise((resolve) => { allCopied = resolve; });
  await copier.run({
    autoCommit: false,
    eachBatch: async ({ batch }) => {
      const tx = await txProducer.transaction();
      await tx.send({ topic: output, messages: batch.messages.map((m) => ({ key: m.key, value: m.value })) });
      const last = batch.messages[batch.messages.length - 1];
      await tx.sendOffsets({ consumerGroupId: groupId, topics: [{ topic: batch.topic,
        partitions: [{ partition: batch.partition, offset: (BigInt(last.offset) + 1n).toString() }] }] });
      await tx.commit();
      copied += batch.messages.length;
      if (copied >= COUNT) allCopied();
    },
  });
  await Promise.race([copiedAll, new Promise((r) => setTimeout(r, 40000))]);
  await copier.disconnect();

  // 3. an aborted transaction: its records must never be read under read_committed
  const aborted = await txProducer.transaction();
  await aborted.send({ topic: output, messages: [{ value: "aborted-1" }, { value: "aborted-2" }] });
  await aborted.abort();
  await txProducer.disconnect();

  // 4. committed offsets of the copier group, and the output read by a read_committed group
  const admin2 = kafka.admin();
  await admin2.connect();
  const offsets = await admin2.fetchOffsets({ groupId, topics: [input] });
  await admin2.disconnect();
  const committed = offsets[0].partitions.reduce((n, p) => n + Number(p.offset), 0);
  const out = await readAll(`reader-${suffix}`, output, COUNT, "committed");
  console.log(JSON.stringify({ copied, committed, output: out.sort() }));
}

main().then(() => process.exit(0), (err) => {
  console.log(JSON.stringify({ error: String(err && err.stack || err) }));
  process.exit(1);
});
