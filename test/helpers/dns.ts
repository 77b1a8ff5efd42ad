/**
 * A DNS server a test controls (I3: names that rebind), on 127.0.0.1 over UDP: it answers A and AAAA queries from
 * the records it is given, NXDOMAIN for any other name. Enough of RFC 1035 for c-ares (node.dnsServers): one
 * question, answers by pointer to it, no compression otherwise, the rest of a query (EDNS) ignored.
 */
import dgram from 'node:dgram';
import ipaddr from 'ipaddr.js';

export interface TestDns {
  /** `127.0.0.1:port`, as node.dnsServers takes it. */
  address: string;
  /** Every name it was asked, in order (lower case). */
  asked: string[];
  close(): Promise<void>;
}

const A = 1;
const AAAA = 28;

export async function startDns(records: Record<string, string[]>): Promise<TestDns> {
  const socket = dgram.createSocket('udp4');
  const asked: string[] = [];
  socket.on('message', (query, from) => {
    // The question: labels from byte 12, then type and class.
    const labels: string[] = [];
    let at = 12;
    while (at < query.length && query[at] !== 0) {
      labels.push(query.subarray(at + 1, at + 1 + query[at]).toString('ascii'));
      at += query[at] + 1;
    }
    const name = labels.join('.').toLowerCase();
    const type = query.readUInt16BE(at + 1);
    const questionEnd = at + 5;
    asked.push(name);
    const known = Object.hasOwn(records, name);
    const answers = (known ? records[name] : [])
      .map((address) => ipaddr.parse(address))
      .filter((ip) => (type === A ? ip.kind() === 'ipv4' : type === AAAA && ip.kind() === 'ipv6'))
      .map((ip) => {
        const data = Buffer.from(ip.toByteArray());
        const rr = Buffer.alloc(12);
        rr.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's
        rr.writeUInt16BE(type, 2);
        rr.writeUInt16BE(1, 4); // IN
        rr.writeUInt32BE(0, 6); // TTL 0: nothing kept between tries
        rr.writeUInt16BE(data.length, 10);
        return Buffer.concat([rr, data]);
      });
    const header = Buffer.alloc(12);
    query.copy(header, 0, 0, 2);
    header.writeUInt16BE(0x8180 | (known ? 0 : 3), 2); // a response, recursion available; NXDOMAIN when unknown
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(answers.length, 6);
    socket.send(Buffer.concat([header, query.subarray(12, questionEnd), ...answers]), from.port, from.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', () => resolve()));
  return {
    address: `127.0.0.1:${socket.address().port}`,
    asked,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}
