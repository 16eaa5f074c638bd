// kafkajs's admin client against minibroker: the calls Node admin tools and web consoles make.
// Each step prints what the broker answered; the Python side (test_node_clients.py) checks it.
// Usage: node kafkajs_admin.js HOST:PORT SUFFIX   -> one JSON line (or {"error": ...})
const { Kafka, logLevel, ConfigResourceTypes } = require("kafkajs");

const [broker, suffix] = process.argv.slice(2);
const topic = `js-admin-${suffix}`;
const groupId = `js-admin-group-${suffix}`;
const kafka = new Kafka({ clientId: "kafkajs-admin", brokers: [broker], logLevel: logLevel.NOTHING,
                          retry: { retries: 5 } });

function configMap(resource) {
  const out = {};
  for (const entry of resource.configEntries) {
    out[entry.configName] = { value: entry.configValue, isDefault: entry.isDefault,
                              readOnly: entry.readOnly };
  }
  return out;
}

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  const result = {};

  const cluster = await admin.describeCluster();
  result.cluster = { brokers: cluster.brokers.map((b) => b.nodeId), controller: cluster.controller };

  result.created = await admin.createTopics({
    topics: [{ topic, numPartitions: 2, configEntries: [{ name: "retention.ms", value: "3600000" }] }],
  });
  await admin.createPartitions({ topicPartitions: [{ topic, count: 3 }] });
  const metadata = await admin.fetchTopicMetadata({ topics: [topic] });
  result.partitions = metadata.topics[0].partitions.map((p) => p.partitionId).sort();
  result.listed = (await admin.listTopics()).includes(topic);

  await admin.alterConfigs({
    validateOnly: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic,
                  configEntries: [{ name: "cleanup.policy", value: "compact" },
                            { name: "retention.ms", value: "7200000" }] }],
  });
  const described = await admin.describeConfigs({
    includeSynonyms: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }, { type: ConfigResourceTypes.BROKER, name: "0" }],
  });
  const topicConfigs = configMap(described.resources[0]);
  const brokerConfigs = configMap(described.resources[1]);
  result.topicConfigs = { "cleanup.policy": topicConfigs["cleanup.policy"],
                          "retention.ms": topicConfigs["retention.ms"],
                          "segment.bytes": topicConfigs["segment.bytes"] };
  result.brokerConfigCount = Object.keys(brokerConfigs).length;

  // the topic is compacted now: a record without a key is refused (Kafka: INVALID_RECORD);
  // then ten keyed records on partition 0, a group that commits offset 6, records before 4 deleted
  const producer = kafka.producer({ retry: { retries: 0 } });
  await producer.connect();
  try {
    await producer.send({ topic, acks: -1, messages: [{ partition: 0, value: "no key" }] });
    result.keylessOnCompacted = "accepted";
  } catch (err) {
    result.keylessOnCompacted = err.type || err.name;
  }
  await producer.send({ topic, acks: -1,
                        messages: Array.from({ length: 10 }, (_, i) => ({ partition: 0, key: `k${i}`, value: `v${i}` })) });
  await producer.disconnect();
  await admin.setOffsets({ groupId, topic, partitions: [{ partition: 0, offset: "6" }] });
  result.groupOffsets = (await admin.fetchOffsets({ groupId, topics: [topic] }))[0].partitions
    .map((p) => [p.partition, p.offset]).sort();
  result.groups = (await admin.listGroups()).groups.map((g) => g.groupId).filter((g) => g === groupId);
  result.groupState = (await admin.describeGroups([groupId])).groups[0].state;
  await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: "4" }] });
  result.topicOffsets = (await admin.fetchTopicOffsets(topic))
    .map((p) => [p.partition, p.low, p.high]).sort();
  await admin.deleteGroups([groupId]);
  result.groupsAfterDelete = (await admin.listGroups()).groups.filter((g) => g.groupId === groupId).length;

  await admin.deleteTopics({ topics: [topic] });
  result.listedAfterDelete = (await admin.listTopics()).includes(topic);
  await admin.disconnect();
  console.log(JSON.stringify(result));
}

main().catch((err) => {
  console.log(JSON.stringify({ error: `${err.name}: ${err.message}`, type: err.type || null }));
  process.exit(1);
});
